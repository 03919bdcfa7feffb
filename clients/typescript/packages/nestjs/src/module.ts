import {
  ConfigurableModuleBuilder,
  Inject,
  Module,
  type ConfigurableModuleAsyncOptions,
  type DynamicModule,
  type InjectionToken,
  type Provider,
} from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { BallastClient, type ClientOptions, type SystemName } from '@ballast/client';

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
 * What {@link BallastModule.forRoot} and {@link BallastModule.forRootAsync}
 * take besides the client's options: they shape the module, so they are
 * given as they are, never by a factory.
 */
export interface BallastModuleExtras {
  /** Provide {@link BallastClient} to every module without importing this one (default `false`), as Nest's `ConfigModule` does. */
  isGlobal?: boolean;
  /**
   * Receive the gateway's callbacks: a controller at `POST /ballast/callbacks`
   * (`path`) checks each with the secret (`secret`, or the variable
   * `secretEnv` names) and hands it to the `@OnBallastTask` handlers and
   * {@link BallastTaskEvents}' listeners. Needs the raw body:
   * `NestFactory.create(AppModule, { rawBody: true })`. A secret from
   * configuration comes by `secretEnv`: the controller's route is fixed when
   * the module is made, before any factory runs.
   */
  callbacks?: BallastCallbackOptions | undefined;
}

/** What {@link BallastModule.forRoot} takes: where the gateway is, and the module's shape. */
export interface BallastModuleOptions extends ClientOptions, BallastModuleExtras {}

/**
 * A class that makes the client's options, for `forRootAsync({ useClass })`
 * and `forRootAsync({ useExisting })`.
 *
 * @example
 * \@Injectable()
 * export class BallastConfig implements BallastOptionsFactory {
 *   constructor(private readonly config: ConfigService) {}
 *   createBallastOptions(): ClientOptions {
 *     return { baseUrl: this.config.getOrThrow('BALLAST_GATEWAY_URL'), token: this.config.getOrThrow('BALLAST_GATEWAY_TOKEN') };
 *   }
 * }
 */
export interface BallastOptionsFactory {
  createBallastOptions(): ClientOptions | Promise<ClientOptions>;
}

/**
 * What {@link BallastModule.forRootAsync} takes: the client's options from
 * `useFactory` (with `inject`), `useClass` or `useExisting` — Nest's
 * `ConfigurableModuleBuilder` options — and the module's shape.
 */
export interface BallastModuleAsyncOptions
  extends ConfigurableModuleAsyncOptions<ClientOptions, 'createBallastOptions'>,
    BallastModuleExtras {}

/** What {@link BallastModule.forFeature} takes. */
export interface BallastFeatureOptions {
  /** The system the module's client is bound to: a name of `ballast.toml`. */
  system: SystemName;
}

const { ConfigurableModuleClass } = new ConfigurableModuleBuilder<ClientOptions>({
  optionsInjectionToken: BALLAST_OPTIONS,
})
  .setClassMethodName('forRoot')
  .setFactoryMethodName('createBallastOptions')
  .setExtras<BallastModuleExtras>({ isGlobal: false, callbacks: undefined }, rootModule)
  .build();

/**
 * `ballast serve`'s gateway in a NestJS application.
 *
 * `forRoot` (or `forRootAsync`) provides one {@link BallastClient} — inject
 * it by its class, or with `@InjectBallast()` — and a
 * {@link BallastHealthIndicator} for `@nestjs/terminus`; with `callbacks`,
 * {@link BallastTaskEvents} and the controller the gateway POSTs the ends of
 * deferred writes to. `forFeature({ system })` provides that client bound
 * to one system, injected with `@InjectBallast('sber')`: the guide's "one
 * client per external system".
 *
 * The policies — retry, breaker, bulkhead, timeout, the durable queue — live
 * in `ballast.toml`, one per external system, instead of a cockatiel
 * `wrap(…)` in each adapter: nothing here retries (R-RES-RE-X4).
 *
 * @example
 * \@Module({
 *   imports: [
 *     BallastModule.forRoot({
 *       isGlobal: true,
 *       baseUrl: 'http://127.0.0.1:9465',
 *       token: process.env.BALLAST_GATEWAY_TOKEN,
 *       callbacks: { secretEnv: 'BALLAST_CALLBACK_SECRET' },
 *     }),
 *     PaymentsModule, // imports BallastModule.forFeature({ system: 'sber' })
 *   ],
 * })
 * export class AppModule {}
 */
@Module({})
export class BallastModule extends ConfigurableModuleClass {
  /** The module with `options` as they are. */
  static override forRoot(options: BallastModuleOptions = {}): DynamicModule {
    return super.forRoot(options);
  }

  /**
   * The module with options made once the providers they need exist: by a
   * factory (`useFactory`, `inject`), a class of yours (`useClass`) or a
   * provider that exists already (`useExisting`), implementing
   * {@link BallastOptionsFactory}.
   *
   * @example
   * BallastModule.forRootAsync({
   *   isGlobal: true,
   *   imports: [ConfigModule],
   *   inject: [ConfigService],
   *   useFactory: (config: ConfigService) => ({
   *     baseUrl: config.getOrThrow('BALLAST_GATEWAY_URL'),
   *     token: config.getOrThrow('BALLAST_GATEWAY_TOKEN'),
   *   }),
   * })
   */
  static override forRootAsync(options: BallastModuleAsyncOptions): DynamicModule {
    if (!options.useFactory && !options.useClass && !options.useExisting) {
      throw new TypeError('BallastModule.forRootAsync: give useFactory, useClass or useExisting');
    }
    return super.forRootAsync(options);
  }

  /**
   * The client of `forRoot` bound to one system, provided (and exported) for
   * `@InjectBallast(system)`: an adapter gets a
   * {@link SystemClient} that calls its system and no other. Import it in
   * the adapter's module; the client it binds comes from
   * `BallastModule.forRoot({ isGlobal: true })` (or `forRootAsync`).
   *
   * @example
   * \@Module({
   *   imports: [BallastModule.forFeature({ system: 'sber' })],
   *   providers: [SberAdapter],
   * })
   * export class SberModule {}
   */
  static forFeature(options: BallastFeatureOptions): DynamicModule {
    const { system } = options;
    if (typeof system !== 'string' || system === '') {
      throw new TypeError("BallastModule.forFeature({ system }): name a system of ballast.toml, e.g. { system: 'sber' }");
    }
    const token = getBallastToken(system);
    return {
      module: BallastModule,
      providers: [{ provide: token, useFactory: (client: BallastClient) => client.system(system), inject: [BallastClient] }],
      exports: [token],
    };
  }
}

/**
 * The injection token of the client `BallastModule.forFeature({ system })`
 * provides: for `moduleRef.get(…)`, or to override it in a test
 * (`.overrideProvider(getBallastToken('sber'))`).
 */
export function getBallastToken(system: SystemName): string {
  return `BallastModule.forFeature({ system: ${JSON.stringify(system)} })`;
}

/**
 * Injects the client of `system` — a {@link SystemClient} that calls it and
 * no other, provided by `BallastModule.forFeature({ system })` — or, with no
 * system, the {@link BallastClient} of `forRoot`.
 *
 * @example
 * \@Injectable()
 * export class SberAdapter {
 *   constructor(\@InjectBallast('sber') private readonly sber: SystemClient<'sber'>) {}
 * }
 */
export function InjectBallast(system?: SystemName): PropertyDecorator & ParameterDecorator {
  return Inject(system === undefined ? BallastClient : getBallastToken(system));
}

/**
 * `forRoot`'s module: the options provider `ConfigurableModuleBuilder` made,
 * the client made from them and the health indicator; with `callbacks`, the
 * events and their controller too.
 */
function rootModule(definition: DynamicModule, extras: BallastModuleExtras): DynamicModule {
  const client: Provider = {
    provide: BallastClient,
    useFactory: (options: ClientOptions) => new BallastClient(options),
    inject: [BALLAST_OPTIONS],
  };
  const module: DynamicModule = {
    ...definition,
    global: extras.isGlobal ?? false,
    providers: [...(definition.providers ?? []), client, BallastHealthIndicator],
    exports: [BallastClient, BallastHealthIndicator, BALLAST_OPTIONS],
  };
  const { callbacks } = extras;
  if (callbacks === undefined) return module;
  const path = callbacks.path ?? DEFAULT_CALLBACK_PATH;
  return {
    ...module,
    // DiscoveryModule finds the @OnBallastTask handlers.
    imports: [...(module.imports ?? []), DiscoveryModule],
    providers: [...module.providers!, { provide: BALLAST_CALLBACK_OPTIONS, useValue: callbacks }, BallastTaskEvents],
    exports: [...module.exports!, BallastTaskEvents],
    controllers: path === false ? [] : [callbackController(path)],
  };
}
