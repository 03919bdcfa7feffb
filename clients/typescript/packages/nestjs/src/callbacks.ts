import {
  BadRequestException,
  Controller,
  HttpCode,
  Inject,
  Injectable,
  InternalServerErrorException,
  Logger,
  Post,
  Req,
  UnauthorizedException,
  type InjectionToken,
  type OnApplicationBootstrap,
  type Type,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import {
  CallbackSignatureError,
  DELIVERY_HEADER,
  SIGNATURE_HEADER,
  verifyCallback,
  type CallbackEvent,
  type SystemName,
} from '@ballast/client';

/** How a deferred write ended: what a callback's `type` says after `task.`. */
export type TaskOutcome = 'completed' | 'failed' | 'cancelled';

/**
 * A verified callback as handlers get it: the gateway's event, how the
 * write ended, and the callback's `Ballast-Delivery` id — the same on every
 * retry of this callback, for a handler that dedupes durably.
 */
export interface BallastTaskEvent extends CallbackEvent {
  outcome: TaskOutcome;
  delivery: string;
}

/** A function {@link BallastTaskEvents.subscribe} calls with every event. */
export type BallastTaskListener = (event: BallastTaskEvent) => unknown;

/** Where the callbacks' secret comes from: as is, or the environment variable that holds it. */
export type CallbackSecret = { secret: string; secretEnv?: never } | { secretEnv: string; secret?: never };

/**
 * `BallastModule`'s `callbacks`: receive the gateway's callbacks — the ends
 * of deferred writes whose `writeOrDefer` named a `callback` URL — as events.
 */
export type BallastCallbackOptions = CallbackSecret & {
  /**
   * The route of the receiving controller, `POST /{path}` (default
   * {@link DEFAULT_CALLBACK_PATH}; under the app's global prefix, if it has
   * one). `false`: no controller — call {@link BallastTaskEvents.receive}
   * from your own.
   */
  path?: string | false;
  /** How far a signature's timestamp may be from now, in seconds (default 300). */
  toleranceSec?: number;
  /** How many handled `Ballast-Delivery` ids are remembered to drop repeats (default 10 000). */
  remember?: number;
};

/** The route the callbacks' controller takes unless `callbacks.path` says otherwise. */
export const DEFAULT_CALLBACK_PATH = 'ballast/callbacks';

/** The injection token of the {@link BallastCallbackOptions} the module was given. */
export const BALLAST_CALLBACK_OPTIONS: InjectionToken<BallastCallbackOptions> = Symbol('BALLAST_CALLBACK_OPTIONS');

const ON_BALLAST_TASK = 'ballast:on-task';
const OUTCOMES: readonly TaskOutcome[] = ['completed', 'failed', 'cancelled'];

/** Which callbacks an {@link OnBallastTask} handler takes besides their outcome. */
export interface OnBallastTaskOptions {
  /** Only the deferred writes to this system (a task's `system`). */
  system: SystemName;
}

/** What one {@link OnBallastTask} says: these outcomes, of this system's writes or of any. */
interface Subscription {
  outcomes: readonly TaskOutcome[];
  system: string | undefined;
}

/**
 * Makes a provider's (or controller's) method a handler of the gateway's
 * callbacks for the outcomes named — every outcome when none is — and, with
 * `{ system }` last, of that system's deferred writes only. It gets a
 * {@link BallastTaskEvent}; the callback is answered once every handler of
 * it has finished, 500 if one threw, and then the gateway sends it again.
 *
 * A handler must bear being called again for the same event: a retry after
 * a failure runs every handler of it again, and another replica of the app
 * does not share this one's memory of what was handled. Update state
 * conditionally (`… WHERE status = 'deferred'`) or dedupe by `event.delivery`.
 *
 * Handlers of request-scoped providers are not called (there is no request
 * to make them for): put them on a singleton.
 *
 * @example
 * \@Injectable()
 * export class ConfirmationReconciler {
 *   \@OnBallastTask('completed', { system: 'sber' })
 *   async confirmed({ task }: BallastTaskEvent) {
 *     await this.orders.markConfirmed(task.task_id, answerJson<SberConfirmation>(task));
 *   }
 *
 *   \@OnBallastTask('failed', 'cancelled')
 *   async notConfirmed({ task }: BallastTaskEvent) {
 *     await this.orders.markConfirmationFailed(task.task_id, task.last_error);
 *   }
 * }
 */
export function OnBallastTask(...outcomes: TaskOutcome[]): MethodDecorator;
export function OnBallastTask(...args: [...outcomes: TaskOutcome[], options: OnBallastTaskOptions]): MethodDecorator;
export function OnBallastTask(...args: Array<TaskOutcome | OnBallastTaskOptions>): MethodDecorator {
  const last = args.at(-1);
  const options = typeof last === 'object' && last !== null ? last : undefined;
  const outcomes = (options ? args.slice(0, -1) : args) as unknown[];
  for (const outcome of outcomes) {
    if (!OUTCOMES.includes(outcome as TaskOutcome)) {
      throw new TypeError(`@OnBallastTask(${JSON.stringify(outcome)}): an outcome is one of ${OUTCOMES.join(', ')}`);
    }
  }
  if (options && (typeof options.system !== 'string' || options.system === '')) {
    throw new TypeError("@OnBallastTask(…, { system }): name a system of ballast.toml, e.g. { system: 'sber' }");
  }
  const subscription: Subscription = {
    outcomes: outcomes.length ? (outcomes as TaskOutcome[]) : OUTCOMES,
    system: options?.system,
  };
  return (_target, _name, descriptor) => {
    const method = descriptor.value as object;
    const previous = (Reflect.getMetadata(ON_BALLAST_TASK, method) as Subscription[] | undefined) ?? [];
    Reflect.defineMetadata(ON_BALLAST_TASK, [...previous, subscription], method);
    return descriptor;
  };
}

/** One handler found: a method of an instance, and what it takes. */
interface Handler {
  name: string;
  subscriptions: readonly Subscription[];
  call: (event: BallastTaskEvent) => unknown;
}

/** What {@link BallastTaskEvents.receive} takes: a callback request as it came. */
export interface CallbackRequest {
  /** The `Ballast-Signature` header. */
  signature: string | undefined;
  /** The `Ballast-Delivery` header. */
  delivery: string | undefined;
  /** The body as it arrived, byte for byte. */
  body: string | Uint8Array;
}

/**
 * The gateway's callbacks as events: verifies each one, drops the ones
 * already handled (by `Ballast-Delivery`, the last `remember` of them, in
 * memory), and calls every {@link OnBallastTask} handler and every
 * {@link subscribe}d listener of it, concurrently. Provided (and its
 * controller registered) by `BallastModule.forRoot({ callbacks })`.
 *
 * With it, a poller of deferred writes becomes a handler: the gateway says
 * when each one ends.
 *
 * @example
 * // Without a decorator, from a service's constructor:
 * constructor(events: BallastTaskEvents) {
 *   events.subscribe(async (event) => {
 *     if (event.outcome === 'failed') await this.alerts.deferredWriteFailed(event.task);
 *   });
 * }
 */
@Injectable()
export class BallastTaskEvents implements OnApplicationBootstrap {
  readonly #logger = new Logger('BallastTaskEvents');
  readonly #secret: string;
  readonly #tolerance: number | undefined;
  readonly #remember: number;
  /** Deliveries handled, least recently seen first: a Map keeps insertion order. */
  readonly #handled = new Map<string, true>();
  /** Deliveries being handled: a repeat arriving meanwhile waits for the same outcome. */
  readonly #running = new Map<string, Promise<void>>();
  readonly #listeners = new Set<BallastTaskListener>();
  readonly #unheard = new Set<TaskOutcome>();
  #handlers: Handler[] | undefined;

  constructor(
    @Inject(BALLAST_CALLBACK_OPTIONS) options: BallastCallbackOptions,
    @Inject(DiscoveryService) private readonly discovery: DiscoveryService,
    @Inject(MetadataScanner) private readonly scanner: MetadataScanner,
  ) {
    this.#secret = secretOf(options);
    this.#tolerance = options.toleranceSec;
    this.#remember = Math.max(0, options.remember ?? 10_000);
  }

  /** Finds the handlers once the app is up, so that one missing shows at startup, not at the first callback. */
  onApplicationBootstrap(): void {
    this.#handlers ??= this.#discover();
  }

  /**
   * Calls `listener` with every verified event besides the handlers, and
   * waits for what it returns before the callback is answered: a listener
   * that throws (or rejects) fails the callback, and the gateway repeats it.
   *
   * @returns a function that unsubscribes it
   */
  subscribe(listener: BallastTaskListener): () => void {
    this.#listeners.add(listener);
    return () => void this.#listeners.delete(listener);
  }

  /**
   * Handles one callback request: what the module's controller calls, and
   * what a controller of your own calls with `callbacks.path: false`.
   *
   * @returns `handled`, or `duplicate` when this delivery was handled already (answer it 2xx all the same)
   * @throws CallbackSignatureError when it is not the gateway's or is stale: answer 401, act on nothing
   * @throws TypeError when `delivery` is missing (answer 400)
   * @throws whatever a handler or listener threw (an `AggregateError` when several did): answer 5xx, and the gateway repeats it
   */
  async receive(request: CallbackRequest): Promise<'handled' | 'duplicate'> {
    const event = verifyCallback({
      secret: this.#secret,
      signature: request.signature,
      body: request.body,
      ...(this.#tolerance === undefined ? {} : { toleranceSec: this.#tolerance }),
    });
    const delivery = request.delivery;
    if (typeof delivery !== 'string' || delivery === '') {
      throw new TypeError(`no ${DELIVERY_HEADER} header: every callback of the gateway has one`);
    }
    if (this.#handled.delete(delivery)) {
      // Remembered anew: a delivery the gateway keeps repeating is the last to be forgotten.
      this.#handled.set(delivery, true);
      return 'duplicate';
    }
    const running = this.#running.get(delivery);
    if (running) {
      await running;
      return 'duplicate';
    }
    const outcome = event.type.slice('task.'.length) as TaskOutcome;
    const dispatched = this.#dispatch({ ...event, outcome, delivery });
    this.#running.set(delivery, dispatched);
    try {
      await dispatched;
    } finally {
      this.#running.delete(delivery);
    }
    this.#handled.set(delivery, true);
    for (const oldest of this.#handled.keys()) {
      if (this.#handled.size <= this.#remember) break;
      this.#handled.delete(oldest);
    }
    return 'handled';
  }

  async #dispatch(event: BallastTaskEvent): Promise<void> {
    this.#handlers ??= this.#discover();
    const calls = [
      ...this.#handlers.filter((h) => takes(h, event)).map((h) => ({ name: h.name, call: h.call })),
      ...[...this.#listeners].map((listener, i) => ({ name: `listener ${i + 1}`, call: listener })),
    ];
    if (calls.length === 0 && !this.#unheard.has(event.outcome)) {
      // Answered 2xx all the same: nothing here would ever take it.
      this.#unheard.add(event.outcome);
      this.#logger.warn(`no @OnBallastTask('${event.outcome}') handler and no listener: task.${event.outcome} dropped`);
    }
    const settled = await Promise.allSettled(calls.map(async ({ call }) => call(event)));
    const failed: unknown[] = [];
    settled.forEach((result, i) => {
      if (result.status === 'fulfilled') return;
      failed.push(result.reason);
      const error = result.reason as Error | undefined;
      this.#logger.error(
        `${calls[i]!.name} failed on task.${event.outcome} of ${event.task.task_id} ` +
          `(delivery ${event.delivery}); the gateway will send it again: ${error?.message ?? String(error)}`,
        error?.stack,
      );
    });
    if (failed.length === 1) throw failed[0];
    if (failed.length > 1) throw new AggregateError(failed, `${failed.length} handlers of task.${event.outcome} failed`);
  }

  /** Every method marked {@link OnBallastTask} on a singleton provider or controller. */
  #discover(): Handler[] {
    const handlers: Handler[] = [];
    const seen = new Set<object>();
    for (const wrapper of [...this.discovery.getProviders(), ...this.discovery.getControllers()]) {
      const singleton = wrapper.isDependencyTreeStatic();
      const instance: unknown = wrapper.instance;
      // A request-scoped provider has no instance to call; its class still says what it meant to handle.
      const target: unknown =
        singleton && instance && typeof instance === 'object'
          ? Object.getPrototypeOf(instance)
          : (wrapper.metatype as Type | null | undefined)?.prototype;
      if (!target || typeof target !== 'object' || seen.has(singleton ? (instance as object) : target)) continue;
      seen.add(singleton ? (instance as object) : target);
      for (const name of this.scanner.getAllMethodNames(target)) {
        const method = (target as Record<string, unknown>)[name];
        const subscriptions = Reflect.getMetadata(ON_BALLAST_TASK, method as object) as Subscription[] | undefined;
        if (!subscriptions) continue;
        const where = `${(target as object).constructor.name}.${name}`;
        if (!singleton) {
          this.#logger.warn(`${where} is not called: @OnBallastTask handlers are on singleton providers`);
          continue;
        }
        const call = (event: BallastTaskEvent) => (method as (e: BallastTaskEvent) => unknown).call(instance, event);
        handlers.push({ name: where, subscriptions, call });
      }
    }
    return handlers;
  }
}

/** Whether `handler` takes `event`: one of its decorators names its outcome, and its system if it names one. */
function takes(handler: Handler, event: BallastTaskEvent): boolean {
  return handler.subscriptions.some(
    (s) => s.outcomes.includes(event.outcome) && (s.system === undefined || s.system === event.task.system),
  );
}

/** The secret the options name, or why there is none. */
function secretOf(options: BallastCallbackOptions): string {
  const { secret, secretEnv } = options as { secret?: string; secretEnv?: string };
  if (secret !== undefined && secretEnv !== undefined) {
    throw new TypeError('BallastModule callbacks: give secret or secretEnv, not both');
  }
  if (secretEnv !== undefined) {
    const value = process.env[secretEnv];
    if (!value) {
      throw new TypeError(
        `BallastModule callbacks: ${secretEnv} is not set; it holds the secret [gateway] callback_secret_env names`,
      );
    }
    return value;
  }
  if (!secret) {
    throw new TypeError('BallastModule callbacks: give secret, or secretEnv naming the variable that holds it');
  }
  return secret;
}

/** What the callbacks' controller reads of a request: Express and Fastify requests both have it. */
interface RawRequest {
  headers: Record<string, string | string[] | undefined>;
  /** The body's bytes, with `NestFactory.create(AppModule, { rawBody: true })`. */
  rawBody?: Buffer;
  body?: unknown;
}

/**
 * The controller receiving callbacks at `POST /{path}`: 204 for an event
 * handled (or handled already), 401 for a signature that is not the
 * gateway's, 400 without `Ballast-Delivery`, 500 when a handler failed —
 * and then the gateway sends it again.
 */
export function callbackController(path: string): Type<unknown> {
  @Controller(path)
  class BallastCallbackController {
    readonly #logger = new Logger('BallastCallbacks');

    constructor(@Inject(BallastTaskEvents) private readonly events: BallastTaskEvents) {}

    @Post()
    @HttpCode(204)
    async receive(@Req() request: RawRequest): Promise<void> {
      const body = request.rawBody ?? (typeof request.body === 'string' ? request.body : undefined);
      if (body === undefined) {
        // The parsed body cannot be verified: its bytes are gone. 500, so the gateway repeats it once fixed.
        this.#logger.error(
          'a callback came without its raw body: create the app with NestFactory.create(AppModule, { rawBody: true })',
        );
        throw new InternalServerErrorException('the callback receiver is not set up: see its log');
      }
      const delivery = header(request, DELIVERY_HEADER);
      try {
        await this.events.receive({ signature: header(request, SIGNATURE_HEADER), delivery, body });
      } catch (error) {
        if (error instanceof CallbackSignatureError) {
          this.#logger.warn(`a callback refused (${error.kind}): ${error.message}`);
          throw new UnauthorizedException(error.message);
        }
        if (delivery === undefined) throw new BadRequestException(`no ${DELIVERY_HEADER} header`);
        // The handlers' errors are logged where they failed; the gateway only needs to know to repeat it.
        throw new InternalServerErrorException('a handler of the callback failed: the gateway will send it again', {
          cause: error,
        });
      }
    }
  }
  return BallastCallbackController;
}

function header(request: RawRequest, name: string): string | undefined {
  const value = request.headers[name];
  return Array.isArray(value) ? value.join(',') : value;
}
