import {
  Module,
  type DynamicModule,
  type InjectionToken,
  type ModuleMetadata,
  type OptionalFactoryDependency,
  type Provider,
} from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { BallastClient, type ClientOptions } from '@ballast/client';

import {
  BALLAST_CALLBACK_OPTIONS,
  BallastTaskEvents,
  DEFAULT_CALLBACK_PATH,
  callbackController,
  type BallastCallbackOptions,
} from './callbacks.js';
import { BallastHealthIndicator } from './health.js';

/** The injection token of the {@link ClientOptions} the module was given. */
export const BALLAST_OPTIONS: InjectionToken<ClientOptions> = Symbol('BALLAST_OPTIONS');

/**
 * What {@link BallastModule.forRoot} takes: where the gateway is, whether
 * every module sees the client, and whether the app receives callbacks.
 */
export interface BallastModuleOptions extends ClientOptions {
  /** Provide {@link BallastClient} to every module without importing this one (default `false`). */
  global?: boolean;
  /**
   * Receive the gateway's callbacks: a controller at `POST /ballast/callbacks`
   * (`path`) checks each with the secret (`secret`, or the variable
   * `secretEnv` names) and hands it to the `@OnBallastTask` handlers and
   * {@link BallastTaskEvents}' listeners. Needs the raw body:
   * `NestFactory.create(AppModule, { rawBody: true })`.
   */
  callbacks?: BallastCallbackOptions;
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
  /**
   * Receive the gateway's callbacks, as with {@link BallastModule.forRoot}:
   * given here, not by the factory, because the controller's route is fixed
   * when the module is made. A secret from configuration comes by `secretEnv`.
   */
  callbacks?: BallastCallbackOptions;
}

/**
 * The gateway of `ballast serve` for a NestJS application: provides one
 * {@link BallastClient} (inject it by its class) and a
 * {@link BallastHealthIndicator} for `@nestjs/terminus`; with `callbacks`,
 * {@link BallastTaskEvents} and the controller the gateway POSTs the ends of
 * deferred writes to.
 *
 * The policies — retry, breaker, bulkhead, timeout, the durable queue — live
 * in `ballast.toml`, one per external system, instead of a cockatiel
 * `wrap(…)` in each adapter: nothing here retries (R-RES-RE-X4).
 *
 * @example
 * \@Module({
 *   imports: [
 *     BallastModule.forRoot({
 *       baseUrl: 'http://127.0.0.1:9465',
 *       token: process.env.BALLAST_GATEWAY_TOKEN,
 *       callbacks: { secretEnv: 'BALLAST_CALLBACK_SECRET' },
 *     }),
 *   ],
 * })
 * export class AppModule {}
 */
@Module({})
export class BallastModule {
  /** The module with `options` as they are. */
  static forRoot(options: BallastModuleOptions = {}): DynamicModule {
    const { global = false, callbacks, ...client } = options;
    return dynamicModule(global, [], { provide: BALLAST_OPTIONS, useValue: client }, callbacks);
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
    return dynamicModule(
      options.global ?? false,
      options.imports ?? [],
      { provide: BALLAST_OPTIONS, useFactory: options.useFactory, inject: options.inject ?? [] },
      options.callbacks,
    );
  }
}

/**
 * The options provider, the client made from them and the health indicator,
 * as one module; with `callbacks`, the events and their controller too.
 */
function dynamicModule(
  global: boolean,
  imports: NonNullable<ModuleMetadata['imports']>,
  options: Provider,
  callbacks: BallastCallbackOptions | undefined,
): DynamicModule {
  const module: DynamicModule = {
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
  if (callbacks === undefined) return module;
  const path = callbacks.path ?? DEFAULT_CALLBACK_PATH;
  return {
    ...module,
    // DiscoveryModule finds the @OnBallastTask handlers.
    imports: [...imports, DiscoveryModule],
    providers: [...module.providers!, { provide: BALLAST_CALLBACK_OPTIONS, useValue: callbacks }, BallastTaskEvents],
    exports: [...module.exports!, BallastTaskEvents],
    controllers: path === false ? [] : [callbackController(path)],
  };
}
