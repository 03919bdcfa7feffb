import { Catch, Logger, type ArgumentsHost } from '@nestjs/common';
import { BaseExceptionFilter } from '@nestjs/core';
import { BallastError, GatewayUnreachableError } from '@ballast/client';

import { toHttpException } from './http-exception.js';

const logger = new Logger('BallastExceptionFilter');

/**
 * Sends a {@link BallastError} or a {@link GatewayUnreachableError} that
 * escaped a handler as the HTTP answer it means — instead of Nest's
 * `{"statusCode":500,"message":"Internal server error"}`, which loses the
 * 503 and the `Retry-After` of an open breaker. The mapping is
 * {@link toHttpException}'s: 503 + `Retry-After` for a system unavailable,
 * 504 for a timeout, 502 for a transport failure (with `sent`), 500 naming
 * the programming error for a key or a path the gateway refused. The app's
 * own mistakes are logged as errors with their stack; every other exception
 * goes on to Nest's own handling. Outside HTTP (GraphQL, say) it returns the
 * `HttpException` for the context to report.
 *
 * Register it through DI, which gives it the HTTP adapter it answers with:
 *
 * @example
 * // app.module.ts
 * \@Module({
 *   providers: [{ provide: APP_FILTER, useClass: BallastExceptionFilter }],
 * })
 * export class AppModule {}
 *
 * // or in main.ts:
 * const { httpAdapter } = app.get(HttpAdapterHost);
 * app.useGlobalFilters(new BallastExceptionFilter(httpAdapter));
 */
@Catch(BallastError, GatewayUnreachableError)
export class BallastExceptionFilter extends BaseExceptionFilter {
  override catch(exception: unknown, host: ArgumentsHost): unknown {
    const mapped = toHttpException(exception);
    if (!mapped) return super.catch(exception, host);
    if (mapped.programmingError) {
      const error = exception as Error;
      logger.error(`a programming error: ${error.message}`, error.stack);
    }
    // GraphQL and other contexts make their answer of the error a filter returns.
    if (host.getType() !== 'http') return mapped;
    const adapter = this.applicationRef ?? this.httpAdapterHost?.httpAdapter;
    if (!adapter) {
      throw new TypeError(
        'BallastExceptionFilter has no HTTP adapter to answer with: provide it as APP_FILTER, ' +
          'or pass app.get(HttpAdapterHost).httpAdapter to its constructor',
      );
    }
    const response: unknown = host.switchToHttp().getResponse();
    if (!adapter.isHeadersSent(response)) {
      for (const [name, value] of Object.entries(mapped.headers)) adapter.setHeader(response, name, value);
    }
    super.catch(mapped, host);
    return undefined;
  }
}
