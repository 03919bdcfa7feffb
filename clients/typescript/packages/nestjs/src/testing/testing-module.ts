import { Inject, Injectable, Module, type DynamicModule, type OnModuleDestroy } from '@nestjs/common';
import type { SystemName } from '@ballast/client';
import { FakeBallastGateway } from '@ballast/client/testing';

import { BallastTaskEvents } from '../callbacks.js';
import { BallastModule } from '../module.js';

/** What {@link BallastTestingModule.forRoot} takes. */
export interface BallastTestingOptions {
  /** The fake gateway to use (default a new one): script it before or after the module is made. */
  gateway?: FakeBallastGateway;
  /** The systems a new fake gateway serves besides those scripted (a call to another gets `unknown_system`). */
  systems?: readonly SystemName[];
  /** Provide the client to every module, as `BallastModule.forRoot({ isGlobal })` does (default `false`). */
  isGlobal?: boolean;
}

/** Hands the fake gateway's callbacks to the app's `@OnBallastTask` handlers, in process. */
@Injectable()
class CallbackRelay implements OnModuleDestroy {
  readonly #stop: () => void;

  constructor(@Inject(FakeBallastGateway) gateway: FakeBallastGateway, @Inject(BallastTaskEvents) events: BallastTaskEvents) {
    this.#stop = gateway.onCallback((callback) => events.receive(callback));
  }

  onModuleDestroy(): void {
    this.#stop();
  }
}

/**
 * `BallastModule.forRoot` for a test: the same providers — `BallastClient`,
 * the clients of `BallastModule.forFeature`, `BallastHealthIndicator`,
 * `BallastTaskEvents` — on a {@link FakeBallastGateway} instead of `ballast
 * serve`, which the test gets with `moduleRef.get(FakeBallastGateway)`.
 * Scripted answers and problems reach the code under test as the gateway's
 * would; a deferred write's task ends when the test says
 * (`gateway.complete(taskId, …)`), and its callback, signed, reaches the
 * app's `@OnBallastTask` handlers before `complete` returns.
 *
 * @example
 * const moduleRef = await Test.createTestingModule({
 *   imports: [BallastTestingModule.forRoot({ isGlobal: true }), SberModule],
 * }).compile();
 * const gateway = moduleRef.get(FakeBallastGateway);
 * gateway.on('sber', 'POST payments/register').problem('breaker_open', { retryAfter: 30 });
 *
 * await assert.rejects(moduleRef.get(SberAdapter).registerPayment(cmd), { kind: 'system_unavailable', retryAfter: 30 });
 */
@Module({})
export class BallastTestingModule {
  static forRoot(options: BallastTestingOptions = {}): DynamicModule {
    const gateway = options.gateway ?? new FakeBallastGateway({ systems: options.systems ?? [] });
    return {
      module: BallastTestingModule,
      global: options.isGlobal ?? false,
      imports: [
        BallastModule.forRoot({
          ...gateway.clientOptions(),
          // No controller: the callbacks come in process, signed with the fake's secret all the same.
          callbacks: { secret: gateway.callbackSecret, path: false },
        }),
      ],
      providers: [{ provide: FakeBallastGateway, useValue: gateway }, CallbackRelay],
      exports: [BallastModule, FakeBallastGateway],
    };
  }
}
