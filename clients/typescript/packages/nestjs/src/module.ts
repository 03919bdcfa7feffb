import {
  Module,
  type DynamicModule,
  type InjectionToken,
  type ModuleMetadata,
  type OptionalFactoryDependency,
  type Provider,
} from '@nestjs/common';
import { BallastClient, type ClientOptions } from '@ballast/client';

import { BallastHealthIndicator } from './health.js';

/** The injection token of the {@link ClientOptions} the module was given. */
export const BALLAST_OPTIONS: InjectionToken<ClientOptions> = Symbol('BALLAST_OPTIONS');

/** What {@link BallastModule.forRoot} takes: where the gateway is, and whether every module sees the client. */
export interface BallastModuleOptions extends ClientOptions {
  /** Provide {@link BallastClient} to every module without importing this one (default `false`). */
  global?: boolean;
}

/** What {@link BallastModule.forRootAsync} takes: the options made by a factory, from a `ConfigService` say. */
export interface BallastModuleAsyncOptions extends Pick<ModuleMetadata, 'imports'> {
  /** Providers handed to `useFactory`, in order. */
  inject?: Array<InjectionToken | OptionalFactoryDependency>;
  /** The client's options. */
  // Nest's own factory providers take any arguments; `inject` decides them.
  useFactory: (...args: any[]) => ClientOptions | Promise<ClientOptions>;
  /** Provide {@link BallastClient} to every module without importing this one (default `false`). */
  global?: boolean;
}

/**
 * The gateway of `ballast serve` for a NestJS application: provides one
 * {@link BallastClient} (inject it by its class) and a
 * {@link BallastHealthIndicator} for `@nestjs/terminus`.
 *
 * The policies — retry, breaker, bulkhead, timeout, the durable queue — live
 * in `ballast.toml`, one per external system, instead of a cockatiel
 * `wrap(…)` in each adapter: nothing here retries (R-RES-RE-X4).
 *
 * @example
 * \@Module({
 *   imports: [BallastModule.forRoot({ baseUrl: 'http://127.0.0.1:9465', token: process.env.BALLAST_GATEWAY_TOKEN })],
 * })
 * export class AppModule {}
 */
@Module({})
export class BallastModule {
  /** The module with `options` as they are. */
  static forRoot(options: BallastModuleOptions = {}): DynamicModule {
    const { global = false, ...client } = options;
    return dynamicModule(global, [], { provide: BALLAST_OPTIONS, useValue: client });
  }

  /**
   * The module with options a factory makes once the providers it injects
   * exist:
   *
   * @example
   * BallastModule.forRootAsync({
   *   imports: [ConfigModule],
   *   inject: [ConfigService],
   *   useFactory: (config: ConfigService) => ({
   *     baseUrl: config.getOrThrow('BALLAST_GATEWAY_URL'),
   *     token: config.get('BALLAST_GATEWAY_TOKEN'),
   *   }),
   * })
   */
  static forRootAsync(options: BallastModuleAsyncOptions): DynamicModule {
    return dynamicModule(options.global ?? false, options.imports ?? [], {
      provide: BALLAST_OPTIONS,
      useFactory: options.useFactory,
      inject: options.inject ?? [],
    });
  }
}

/** The options provider, the client made from them and the health indicator, as one module. */
function dynamicModule(
  global: boolean,
  imports: NonNullable<ModuleMetadata['imports']>,
  options: Provider,
): DynamicModule {
  return {
    module: BallastModule,
    global,
    imports,
    providers: [
      options,
      {
        provide: BallastClient,
        useFactory: (client: ClientOptions) => new BallastClient(client),
        inject: [BALLAST_OPTIONS],
      },
      BallastHealthIndicator,
    ],
    exports: [BallastClient, BallastHealthIndicator, BALLAST_OPTIONS],
  };
}
