/**
 * `@ballast/nestjs`: `ballast serve`'s gateway in a NestJS application — a
 * module providing an injectable {@link BallastClient} and, per system, a
 * {@link SystemClient} (`@InjectBallast('sber')`); the gateway's errors as
 * the HTTP answers they mean ({@link BallastExceptionFilter}); its callbacks
 * as {@link OnBallastTask} handlers; and health indicators for
 * `@nestjs/terminus`. `@ballast/nestjs/testing` fakes the gateway for a
 * test, or starts a real one.
 *
 * Everything `@ballast/client` exports is exported here too, so an adapter
 * needs one import.
 *
 * @packageDocumentation
 */

export * from '@ballast/client';
export {
  BALLAST_CALLBACK_OPTIONS,
  BallastTaskEvents,
  DEFAULT_CALLBACK_PATH,
  OnBallastTask,
  type BallastCallbackOptions,
  type OnBallastTaskOptions,
  type BallastTaskEvent,
  type BallastTaskListener,
  type CallbackRequest,
  type CallbackSecret,
  type TaskOutcome,
} from './callbacks.js';
export { BallastExceptionFilter } from './exception-filter.js';
export { BallastHealthIndicator, type BallastHealthResult, type BallastSystemsResult } from './health.js';
export {
  BALLAST_HTTP_STATUS,
  BallastHttpException,
  toHttpException,
  type BallastHttpBody,
} from './http-exception.js';
export {
  BALLAST_OPTIONS,
  BallastModule,
  InjectBallast,
  getBallastToken,
  type BallastFeatureOptions,
  type BallastModuleAsyncOptions,
  type BallastModuleExtras,
  type BallastModuleOptions,
  type BallastOptionsFactory,
} from './module.js';
