import { CALLBACK_HEADER } from './callback.js';
import { BallastError, TaskWaitTimeoutError, problemError, type ErrorContext, type Problem } from './error.js';
import type { IdempotencyKey } from './key.js';
import { SystemClient } from './system-client.js';
import type { SystemName } from './systems.js';
import { traceHeaders } from './trace.js';
import { GatewayUnreachableError, isNetworkFailure, type UnreachableContext } from './unreachable.js';

/** Where `ballast serve`'s gateway listens unless `[gateway] listen` says otherwise. */
export const DEFAULT_GATEWAY_URL = 'http://127.0.0.1:9465';

/** Where `ballast serve`'s admin listener (`/health/*`, `/metrics`) listens by default. */
export const DEFAULT_ADMIN_URL = 'http://127.0.0.1:9464';

/** The header on every gateway response: the attempts the call made. */
export const ATTEMPTS_HEADER = 'ballast-attempts';

/** The methods the gateway treats as reads, and so retries. */
export type ReadMethod = 'GET' | 'HEAD' | 'OPTIONS';

/** The methods of a write. */
export type WriteMethod = 'POST' | 'PUT' | 'PATCH' | 'DELETE';

// Node's types have `Headers` and `RequestInit` but not the DOM's names for their parts.
/** What `new Headers(…)` takes. */
export type HeadersInit = NonNullable<ConstructorParameters<typeof Headers>[0]>;
/** What `fetch` sends as a body. */
export type BodyInit = NonNullable<RequestInit['body']>;

/** What every call may send besides its method, URL and body. */
interface Common {
  /**
   * Sent on to the system, except hop-by-hop ones; never `Idempotency-Key`
   * (pass `key` to a write instead). With a `token`, the gateway keeps
   * `Authorization` for itself.
   */
  headers?: HeadersInit;
  /** Stops waiting; the gateway then drops the call (a deferrable write goes on). */
  signal?: AbortSignal;
}

/** A body: as is, or a value sent as JSON — not both. */
type Body = { body?: BodyInit; json?: never } | { json: unknown; body?: never };

/** A read: no body, no key. */
export type ReadInit = Common & { method?: ReadMethod; body?: never; json?: never; key?: never };

/**
 * A keyed write: `key` made once per user action and stored with it
 * ({@link keyFor}, {@link newKey}, {@link IdempotencyKey.from}), never once
 * per attempt.
 */
export type WriteInit = Common & Body & { key: IdempotencyKey; method?: WriteMethod };

/** A write without a key: sent exactly once (R-RES-RE-X1). */
export type WriteOnceInit = Common & Body & { method?: WriteMethod; key?: never };

/**
 * A keyed write the gateway may defer: {@link WriteInit}, and where the
 * gateway is to tell you how the deferred write ended.
 */
export type WriteOrDeferInit = WriteInit & {
  /**
   * An absolute `http(s)` URL, sent as `Ballast-Callback`: if the write is
   * deferred, the gateway POSTs a signed event there once it ends —
   * completed, or failed for good — and repeats it after a 5xx, 408, 429 or
   * no answer. Its host must be one of `[gateway] callback_hosts` (else
   * `bad_callback`, nothing sent). Check each callback with
   * {@link verifyCallback}. Without one, follow the task with
   * {@link BallastClient.task} or {@link BallastClient.waitForTask}.
   */
  callback?: string;
};

/**
 * Why the gateway deferred a write instead of finishing it in memory (a
 * 202's `deferred_because`, a task's `deferred_because`):
 *
 * | reason | |
 * |---|---|
 * | `breaker_open`, `bulkhead_full`, `rate_limited`, `budget_exhausted` | the system was unavailable: nothing more was sent in memory |
 * | `attempts_exhausted` | the in-memory attempts all failed (5xx, lost answers) |
 * | `timeout` | the call's `timeout.total` ran out |
 * | `sequence_pending` | an earlier write of its `Ballast-Sequence` waits in the queue: queued behind it |
 * | `already_deferred` | a write with the same key was already deferred: this request joined that task |
 * | `accepted` | the system accepted it (`202` with a status URL): the gateway follows it to its end |
 * | `draining` | the gateway was restarted while the write was in flight: it may have been applied, and is sent again with its key |
 *
 * (A request that joins an earlier deferral of its key gets that task's
 * handle; a gateway that does not say `already_deferred` gives that task's
 * own reason.)
 */
export type DeferReason =
  | 'breaker_open'
  | 'bulkhead_full'
  | 'rate_limited'
  | 'budget_exhausted'
  | 'attempts_exhausted'
  | 'timeout'
  | 'sequence_pending'
  | 'already_deferred'
  | 'accepted'
  | 'draining';

/**
 * What `writeOrDefer` did: the upstream answered (`deferred: false`), or the
 * gateway's durable queue holds the write, to be followed with its callback,
 * `waitForTask(taskId)` or `task(taskId)`.
 */
export type Handover =
  | { deferred: false; response: Response }
  | {
      deferred: true;
      /**
       * The task's handle (`{id}.{secret}`), to store with the domain object;
       * `null` only for a task an older ballast stored without one.
       */
      taskId: string | null;
      /** `/tasks/{handle}`, relative to the gateway. */
      location: string | null;
      /** The in-memory attempts made before the hand-over. */
      attempts: number | undefined;
      /** Why it was deferred; `null` for a task an older ballast stored without a reason. */
      deferredBecause: DeferReason | null;
      /**
       * When the queue tries it next (the 202's `next_attempt_at`; its
       * `Retry-After` says the same), `null` when the gateway cannot say —
       * a task queued behind another of its sequence, say.
       */
      nextAttemptAt: Date | null;
    };

/** The states of a deferred write: `completed`, `failed` and `cancelled` are final. */
export type TaskState = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/**
 * The upstream's answer to the attempt that ended a deferred write (a task's
 * `result`). Its body is kept up to `[queue] keep_answer` (64 KiB by
 * default): `body` when it is UTF-8 text, `body_base64` otherwise, neither
 * when it is empty (`body_kept: true`, `body_size: 0`) or was larger
 * (`body_kept: false`). {@link answerJson} parses `body`.
 *
 * Only `status` is there for a task delivered before answers were kept, and
 * `answer_error` instead of the rest when the answer is sealed with a key no
 * longer configured.
 */
export interface Answer {
  status: number;
  /**
   * Its end-to-end headers, names in lower case, repeated ones joined with
   * `, ` — without `Set-Cookie` and the transport's own (`Date`, `Server`, …).
   */
  headers?: Record<string, string>;
  /** The body, when it is UTF-8 text, not empty, and was kept. */
  body?: string;
  /** The body in base64, when it was kept but is not UTF-8 text. */
  body_base64?: string;
  /** The body's size in bytes, kept or not. */
  body_size?: number;
  /** Whether the body was kept (`false`: larger than `[queue] keep_answer`). */
  body_kept?: boolean;
  /** Why the kept answer cannot be shown: it is sealed, and does not open. */
  answer_error?: string;
}

/** A deferred write's state, as `GET /tasks/{handle}` (and a callback) shows it: ballast-http's `TaskView`. */
export interface Task {
  task_id: string;
  system: SystemName | null;
  /** The write's method (`POST`); optional: absent from servers before it was shown. */
  method?: string | null;
  /** The write's path, relative to the system's base URL: which write a callback is about. */
  path?: string | null;
  state: TaskState;
  /** Durable attempts made so far. */
  attempts: number;
  /** Durable attempts before it is failed and an operator alerted. */
  max_attempts: number;
  last_error: string | null;
  /** When it is (or was) due, seconds since the Unix epoch. */
  run_at: number;
  /**
   * When its next attempt is due (running: when the attempt under way was),
   * seconds since the Unix epoch; `null` once it ended, or while it waits
   * behind an earlier write of its sequence.
   */
  next_attempt_at: number | null;
  /** Why it was deferred; `null` for a task an older ballast stored without a reason. */
  deferred_because: DeferReason | null;
  /** Once the upstream answered for good — completed, or failed by a 4xx: that answer. */
  result?: Answer;
}

/** What {@link BallastClient.waitForTask} takes. */
export interface WaitForTaskOptions {
  /** Stops waiting: the wait rejects with the signal's reason (an `AbortError` unless it says otherwise). */
  signal?: AbortSignal;
  /**
   * Gives up after this many ms with a {@link TaskWaitTimeoutError} (default:
   * wait until the task ends, or `signal` aborts).
   */
  timeoutMs?: number;
}

/**
 * How usable an external system is now: `up` (breaker closed), `degraded`
 * (half-open, open but due to probe, or held by its rate limit: calls go
 * through in part, keyed writes are deferred) or `unavailable` (open or
 * isolated: calls fail fast, keyed writes are deferred).
 */
export type SystemStatus = 'up' | 'degraded' | 'unavailable';

/** One external system as `/health/ready` and `/health/systems` report it. */
export interface SystemHealth {
  system: SystemName;
  /** Whether `/health/systems` answers 503 while it is `unavailable`. */
  critical: boolean;
  /** How usable it is now. */
  status: SystemStatus;
  /** Its breaker's state; `null` without a breaker. */
  state: 'closed' | 'half_open' | 'open' | 'isolated' | null;
  /** Seconds in that state; `null` without a breaker. */
  since_secs: number | null;
  /** Seconds until the breaker's next probe, when it waits for one. */
  next_probe_in_secs: number | null;
}

/**
 * `ballast serve`'s readiness (`/health/ready`): the gateway's own. An
 * external system's outage does not make it unready — the gateway still
 * takes calls and defers keyed writes, and every replica of an app going
 * unready at once would turn one system's outage into the app's; see
 * {@link SystemsReport} for the systems.
 */
export interface Readiness {
  /** The gateway's queue database answers and stores. */
  ready: boolean;
  /** Each external system's status and breaker, for the record: not part of `ready`. */
  systems: SystemHealth[];
  queue: { reachable: boolean; error?: string; checked_at?: number; storage_error?: string };
}

/**
 * The external systems' health (`/health/systems`): answered 503 while a
 * `critical = true` system is `unavailable` — the way to make an app unready
 * on a system it cannot work without — and 200 otherwise.
 */
export interface SystemsReport {
  /** The worst status of any system (`up` when there is none). */
  status: SystemStatus;
  systems: SystemHealth[];
}

/**
 * Where the gateway is and how to talk to it. Each option may be
 * `undefined` — `token: process.env.BALLAST_GATEWAY_TOKEN` — and then has
 * its default.
 */
export interface ClientOptions {
  /** The gateway, as `ballast serve` prints it (default {@link DEFAULT_GATEWAY_URL}). */
  baseUrl?: string | undefined;
  /**
   * Sent as `Authorization: Bearer <token>` when the gateway asks for one
   * (`[gateway] token_env`, at least 16 bytes).
   */
  token?: string | undefined;
  /** The admin listener, for {@link BallastClient.readiness} and {@link BallastClient.systems} (default {@link DEFAULT_ADMIN_URL}). */
  adminUrl?: string | undefined;
  /** The admin token, when `[serve] protect_metrics` asks for it on `/health/*`. */
  adminToken?: string | undefined;
  /** The `fetch` to use (default the global one). */
  fetch?: typeof fetch | undefined;
}

const READS: ReadonlySet<string> = new Set<ReadMethod>(['GET', 'HEAD', 'OPTIONS']);

const FINAL: ReadonlySet<TaskState> = new Set<TaskState>(['completed', 'failed', 'cancelled']);

/**
 * The longest wait {@link BallastClient.waitForTask} asks the gateway to hold
 * one request for (it holds at most 60 s): short enough that no proxy or
 * idle timeout on the way cuts a held request.
 */
export const MAX_TASK_WAIT_MS = 30_000;

/**
 * The least time between two requests of one {@link BallastClient.waitForTask}:
 * a gateway that answers a still pending task at once (one from before
 * `?wait=`, one draining) is asked once a second, not in a busy loop.
 */
const MIN_ASK_INTERVAL_MS = 1_000;

/** How long past its `timeoutMs` a wait lets an answer already asked for arrive. */
const WAIT_GRACE_MS = 1_000;

/**
 * A client of the outbound gateway of `ballast serve`: every call to an
 * external system goes to `{baseUrl}/call/{system}/{path}` and through that
 * system's policy in `ballast.toml` — retry, breaker, bulkhead, timeout, the
 * durable queue.
 *
 * The method you call declares what the request is (R-RES-RE-1): {@link read}
 * (retried), {@link write} with a key (retried with that key if the system
 * deduplicates by it), {@link writeOrDefer} (the same, or handed to the
 * durable queue), {@link writeOnce} (no key: sent exactly once, R-RES-RE-X1).
 * A deferred write is followed with {@link task} and {@link waitForTask}, or
 * reported to its callback URL ({@link verifyCallback}).
 *
 * It never retries, never times out on its own and never follows a redirect:
 * the gateway's retry loop is the only one (R-RES-RE-X4). Do not wrap its
 * calls in another retry (cockatiel, axios-retry, RxJS `retry()`).
 *
 * Answers: the upstream's own answer comes back as the `Response` it was, a
 * 4xx or a 5xx included — branch on `response.status`. When the gateway
 * answers itself, the call throws a {@link BallastError}. When the gateway
 * cannot be reached, it throws a {@link GatewayUnreachableError}: `sent`
 * says whether the request may have arrived, and for a write
 * `outcomeUnknown` that it may have been applied — repeat a keyed write
 * later with the same key.
 *
 * System names are checked by the compiler once `ballast codegen ts` has
 * written the gateway's systems into a declaration file
 * ({@link BallastSystems}); {@link system} binds a client to one of them.
 *
 * @example
 * const ballast = new BallastClient({ baseUrl: 'http://127.0.0.1:9465' });
 * const order = await (await ballast.read('sber', 'orders/42')).json();
 * const key = IdempotencyKey.from(order.paymentKey); // made once, when the user pressed "pay", and stored
 * const paid = await ballast.write('sber', 'payments/register', { key, json: { amount: 100 } });
 */
export class BallastClient {
  readonly #base: string;
  readonly #admin: string;
  readonly #token: string | undefined;
  readonly #adminToken: string | undefined;
  readonly #fetch: typeof fetch;

  constructor(options: ClientOptions = {}) {
    this.#base = (options.baseUrl ?? DEFAULT_GATEWAY_URL).replace(/\/+$/, '');
    this.#admin = (options.adminUrl ?? DEFAULT_ADMIN_URL).replace(/\/+$/, '');
    this.#token = options.token;
    this.#adminToken = options.adminToken;
    // Called unbound: `fetch` must not run with this client as `this`.
    const fetchImpl = options.fetch ?? globalThis.fetch;
    this.#fetch = (input, init) => fetchImpl(input, init);
  }

  /**
   * This client bound to one system: the same calls without the system's
   * name, for an adapter that talks to one system only (`@ballast/nestjs`
   * injects one with `@InjectBallast('sber')`).
   *
   * @param name the system's name in `ballast.toml`
   * @example
   * const sber = ballast.system('sber');
   * const order = await (await sber.read('orders/42')).json();
   */
  system<const S extends SystemName>(name: S): SystemClient<S> {
    if (typeof name !== 'string' || name === '') throw new TypeError('name the system to call');
    return new SystemClient(this, name);
  }

  /**
   * A read (GET by default, HEAD or OPTIONS), retried by the gateway on
   * transient failures.
   *
   * @param system the system's name in `ballast.toml`
   * @param path relative to the system's `base_url`, with its query if any
   * @returns the upstream's answer, whatever its status
   */
  async read(system: SystemName, path: string, init: ReadInit = {}): Promise<Response> {
    const method = (init.method ?? 'GET').toUpperCase();
    if (!READS.has(method)) {
      throw new TypeError(`${method} is not a read: use write() with a key, or writeOnce()`);
    }
    if ((init as { body?: unknown }).body !== undefined || (init as { json?: unknown }).json !== undefined) {
      throw new TypeError('a read sends no body');
    }
    return this.#call(system, path, method, init, {});
  }

  /**
   * A keyed write (POST by default): the gateway retries it with the same
   * key if the system deduplicates by key, and sends it once otherwise.
   *
   * @returns the upstream's answer, whatever its status
   */
  async write(system: SystemName, path: string, init: WriteInit): Promise<Response> {
    const key = checkedKey('write', init);
    return this.#call(system, path, writeMethod('write', init), init, { 'idempotency-key': key });
  }

  /**
   * A keyed write the gateway may defer: if its in-memory attempts cannot
   * finish it (or the breaker is open), the gateway's durable queue takes it
   * over with the same key and keeps trying, and answers 202 with the task's
   * handle. Only a system with `dedupes_by_key = true` defers; others answer
   * as {@link write} does.
   *
   * Learn how a deferred write ended from its `callback` (the gateway POSTs
   * there: {@link verifyCallback}; its host must be in `[gateway]
   * callback_hosts`), with {@link waitForTask}, or by asking {@link task}
   * now and then.
   *
   * @example
   * const out = await ballast.writeOrDefer('sber', 'orders/42/confirm', {
   *   key: keyFor(42, 'confirm'),
   *   json: {},
   *   callback: 'https://shop.example/ballast/callbacks',
   * });
   * if (out.deferred) await orders.markDeferred(42, out.taskId, out.deferredBecause, out.nextAttemptAt);
   */
  async writeOrDefer(system: SystemName, path: string, init: WriteOrDeferInit): Promise<Handover> {
    const key = checkedKey('writeOrDefer', init);
    const own: Record<string, string> = { 'idempotency-key': key, prefer: 'respond-async' };
    if (init.callback !== undefined) own[CALLBACK_HEADER] = checkedCallback(init.callback);
    const response = await this.#call(system, path, writeMethod('writeOrDefer', init), init, own);
    const applied = response.headers.get('preference-applied') ?? '';
    // A 202 of the upstream's own is its answer, not a hand-over.
    if (response.status !== 202 || !/(^|[\s,])respond-async\b/i.test(applied)) {
      return { deferred: false, response };
    }
    const body = (await response.json()) as {
      task_id: string | null;
      deferred_because?: DeferReason | null;
      next_attempt_at?: number | null;
    };
    return {
      deferred: true,
      taskId: body.task_id,
      location: response.headers.get('location'),
      attempts: attemptsOf(response),
      deferredBecause: body.deferred_because ?? null,
      nextAttemptAt: typeof body.next_attempt_at === 'number' ? new Date(body.next_attempt_at * 1000) : null,
    };
  }

  /**
   * A write without a key (POST by default): sent exactly once, never
   * retried — if its answer is lost, the outcome is unknown (R-RES-RE-X1).
   *
   * @returns the upstream's answer, whatever its status
   */
  async writeOnce(system: SystemName, path: string, init: WriteOnceInit = {}): Promise<Response> {
    if ((init as { key?: unknown }).key !== undefined) {
      throw new TypeError('writeOnce() sends no key: use write() for a keyed write');
    }
    return this.#call(system, path, writeMethod('writeOnce', init), init, {});
  }

  /**
   * Where a deferred write stands, now.
   *
   * @param taskId the handle a deferred {@link writeOrDefer} gave
   * @throws BallastError `not_found` for a handle the gateway does not know
   */
  async task(taskId: string, init: { signal?: AbortSignal } = {}): Promise<Task> {
    const response = await this.#send(this.#taskUrl(taskId), 'GET', init, {}, { taskId });
    return (await response.json()) as Task;
  }

  /**
   * The deferred write once it has ended — `completed`, `failed` or
   * `cancelled` — for a caller that can wait for it (a job, a script, a
   * test; a request handler should answer 202 itself and learn the end
   * from a callback).
   *
   * It asks `GET /tasks/{handle}?wait=…`, which the gateway holds until the
   * task ends or the wait (at most {@link MAX_TASK_WAIT_MS} here) elapses,
   * and asks again while the task goes on. The write itself is never sent
   * from here: waiting is only reading its state. A gateway that holds too
   * many waiting requests answers `too_many_waiters`: this waits its
   * `Retry-After` and asks again.
   *
   * @param taskId the handle a deferred {@link writeOrDefer} gave
   * @returns the task in its final state: check `state` — `failed` and `cancelled` are answers too
   * @throws TaskWaitTimeoutError once `timeoutMs` passed with the task still going on (within about a second of it)
   * @throws the signal's reason once `signal` aborts
   * @throws BallastError for the gateway's other problems (`not_found`: a handle it does not know)
   * @example
   * const task = await ballast.waitForTask(out.taskId!, { timeoutMs: 120_000 });
   * if (task.state === 'completed') return answerJson<Confirmation>(task);
   */
  async waitForTask(taskId: string, options: WaitForTaskOptions = {}): Promise<Task> {
    const { signal, timeoutMs } = options;
    if (timeoutMs !== undefined && !(timeoutMs >= 0)) {
      throw new TypeError(`timeoutMs is a number of ms, 0 or more: not ${timeoutMs}`);
    }
    const deadline = timeoutMs === undefined ? Infinity : Date.now() + timeoutMs;
    let last: Task | undefined;
    const timedOut = () => new TaskWaitTimeoutError(taskId, timeoutMs ?? Infinity, last);
    for (let first = true; ; first = false) {
      signal?.throwIfAborted();
      const asked = Date.now();
      if (!first && asked >= deadline) throw timedOut();
      const left = deadline - asked;
      // Asked with the time left, whole ms; with none left (timeoutMs 0), once without a wait.
      const wait = left >= 1 ? Math.min(MAX_TASK_WAIT_MS, Math.floor(left)) : undefined;
      const request = new AbortController();
      const stop = () => request.abort(signal?.reason);
      signal?.addEventListener('abort', stop, { once: true });
      // A gateway that does not answer by the deadline does not hold the caller past it.
      let cut = false;
      const cutOff = () => {
        cut = true;
        request.abort();
      };
      const timer = Number.isFinite(left) ? setTimeout(cutOff, Math.max(0, left) + WAIT_GRACE_MS) : undefined;
      let pause = 0;
      try {
        const url = this.#taskUrl(taskId) + (wait === undefined ? '' : `?wait=${wait}ms`);
        const response = await this.#send(url, 'GET', { signal: request.signal }, {}, { taskId });
        last = (await response.json()) as Task;
        if (FINAL.has(last.state)) return last;
      } catch (error) {
        if (signal?.aborted) throw signal.reason;
        if (cut) throw timedOut();
        if (!(error instanceof BallastError) || error.reason !== 'too_many_waiters') throw error;
        // Retry-After in seconds; a date (NaN here) or none: a second.
        pause = Number.isFinite(error.retryAfter) ? error.retryAfter! * 1000 : 1000;
      } finally {
        clearTimeout(timer);
        signal?.removeEventListener('abort', stop);
      }
      if (Date.now() >= deadline) throw timedOut();
      pause = Math.min(Math.max(pause, MIN_ASK_INTERVAL_MS - (Date.now() - asked)), deadline - Date.now());
      if (pause > 0) await sleep(pause, signal);
    }
  }

  /**
   * `ballast serve`'s readiness from its admin listener (`/health/ready`):
   * the gateway's own — ready while its queue database answers and stores,
   * whatever the external systems do. Each system's status comes with it;
   * for readiness that depends on them, see {@link systems}.
   *
   * @throws Error when the listener answers something else (401: `adminToken` missing)
   */
  async readiness(signal?: AbortSignal): Promise<Readiness> {
    return (await this.#health('/health/ready', signal)) as Readiness;
  }

  /**
   * The external systems' health from the admin listener (`/health/systems`):
   * each one `up`, `degraded` or `unavailable`, and the worst of them. The
   * listener answers 503 while a `critical = true` system is `unavailable`;
   * either way the report is returned.
   *
   * @throws Error when the listener answers something else (401: `adminToken` missing; 404: a ballast before `/health/systems`)
   * @example
   * const { systems } = await ballast.systems();
   * const sber = systems.find((s) => s.system === 'sber');
   * if (sber?.status === 'unavailable') banner('Payments are delayed: confirmations will follow');
   */
  async systems(signal?: AbortSignal): Promise<SystemsReport> {
    return (await this.#health('/health/systems', signal)) as SystemsReport;
  }

  /** A `/health/*` report: 200 or 503, both with a body that says why. */
  async #health(path: string, signal: AbortSignal | undefined): Promise<unknown> {
    const headers = new Headers({ accept: 'application/json' });
    if (this.#adminToken !== undefined) headers.set('authorization', `Bearer ${this.#adminToken}`);
    const url = `${this.#admin}${path}`;
    const response = await this.#fetchOrUnreachable(
      url,
      { headers, redirect: 'manual', ...(signal ? { signal } : {}) },
      { method: 'GET', url, write: false },
    );
    if (response.status !== 200 && response.status !== 503) {
      throw new Error(`GET ${url} answered ${response.status}: ${(await response.text()).trim()}`);
    }
    return response.json();
  }

  #taskUrl(taskId: string): string {
    if (typeof taskId !== 'string' || taskId === '') {
      throw new TypeError("name the deferred write: the handle its 202 gave (Handover's taskId)");
    }
    return `${this.#base}/tasks/${encodeURIComponent(taskId)}`;
  }

  #call(
    system: string,
    path: string,
    method: string,
    init: Common & { body?: BodyInit; json?: unknown },
    own: Record<string, string>,
  ) {
    if (typeof system !== 'string' || system === '') throw new TypeError('name the system to call');
    const url = `${this.#base}/call/${encodeURIComponent(system)}/${checkedPath(path)}`;
    return this.#send(url, method, init, own, { system });
  }

  async #send(
    url: string,
    method: string,
    init: Common & { body?: BodyInit; json?: unknown },
    own: Record<string, string>,
    context: ErrorContext,
  ): Promise<Response> {
    const headers = new Headers(init.headers);
    if (headers.has('idempotency-key')) {
      throw new TypeError('pass the Idempotency-Key as write(system, path, { key }), not as a header');
    }
    for (const [name, value] of Object.entries(own)) headers.append(name, value);
    if (this.#token !== undefined) headers.set('authorization', `Bearer ${this.#token}`);
    let body = init.body;
    if (init.json !== undefined) {
      if (body !== undefined) throw new TypeError('pass either body or json, not both');
      body = JSON.stringify(init.json);
      if (!headers.has('content-type')) headers.set('content-type', 'application/json');
    }
    await traceHeaders(headers);
    // `manual`: a redirect is the upstream's answer; following it would send
    // the request again, outside the gateway.
    const request: RequestInit = { method, headers, redirect: 'manual' };
    if (body !== undefined) request.body = body;
    if (init.signal) request.signal = init.signal;
    const unreachable = {
      method,
      // A task's handle is its secret: it stays out of error messages and logs.
      url: context.taskId === undefined ? url.split('?', 1)[0]! : `${this.#base}/tasks/…`,
      write: !READS.has(method),
      keyed: headers.has('idempotency-key'),
      system: context.system,
      taskId: context.taskId,
    };
    return passOrThrow(await this.#fetchOrUnreachable(url, request, unreachable), context);
  }

  /** `fetch`, its network failures thrown as {@link GatewayUnreachableError}. */
  async #fetchOrUnreachable(url: string, request: RequestInit, context: UnreachableContext): Promise<Response> {
    try {
      return await this.#fetch(url, request);
    } catch (error) {
      if (isNetworkFailure(error)) throw new GatewayUnreachableError(context, error);
      throw error;
    }
  }
}

/** A client of the gateway: `new BallastClient(options)`. */
export function createBallastClient(options: ClientOptions = {}): BallastClient {
  return new BallastClient(options);
}

/**
 * The JSON body of the upstream's answer that ended a deferred write (its
 * `result.body`, parsed): for a `completed` task, the answer a synchronous
 * write would have had. Check `task.result.status` first when a 4xx could
 * have failed it.
 *
 * @throws TypeError when the task has no answer yet, or its body was not
 * kept (larger than the gateway keeps), is not UTF-8 text or is empty
 * @throws SyntaxError when the body is not JSON
 * @example
 * \@OnBallastTask('completed')
 * async confirmed({ task }: BallastTaskEvent) {
 *   const { orderNumber } = answerJson<SberConfirmResponse>(task);
 *   await this.orders.markConfirmed(orderNumber);
 * }
 */
export function answerJson<T = unknown>(task: Pick<Task, 'task_id' | 'state' | 'result'>): T {
  const answer = task.result;
  const what = `deferred write ${task.task_id}`;
  if (!answer) throw new TypeError(`${what} has no answer (it is ${task.state})`);
  if (answer.answer_error !== undefined) {
    throw new TypeError(`${what} was answered ${answer.status}, and its answer cannot be read: ${answer.answer_error}`);
  }
  if (typeof answer.body !== 'string' || answer.body === '') {
    const why =
      answer.body_base64 !== undefined
        ? 'a body that is not UTF-8 text (see result.body_base64)'
        : answer.body_kept === true
          ? 'an empty body'
          : answer.body_kept === false
            ? `a body of ${answer.body_size ?? '?'} bytes, more than [queue] keep_answer keeps`
            : 'no body kept (delivered by a ballast that kept only the status)';
    throw new TypeError(`${what} was answered ${answer.status} with ${why}`);
  }
  return JSON.parse(answer.body) as T;
}

/** The attempts the gateway made for `response` (its `Ballast-Attempts`). */
export function attemptsOf(response: Response): number | undefined {
  const value = response.headers.get(ATTEMPTS_HEADER);
  return value === null ? undefined : Number(value);
}

/**
 * `path` without leading slashes, refused if it has a `.` or `..` segment:
 * `fetch` would resolve it before the gateway sees it, so `../sms/messages`
 * on `sber` would quietly call the system `sms`.
 */
function checkedPath(path: string): string {
  const relative = String(path).replace(/^\/+/, '');
  const segments = relative.split(/[?#]/, 1)[0]!.split(/[/\\]/);
  if (segments.some((segment) => /^(\.|%2e){1,2}$/i.test(segment))) {
    throw new TypeError(
      `${JSON.stringify(path)} has a dot segment: name the path under the system's base_url as it is`,
    );
  }
  return relative;
}

function writeMethod(what: string, init: { method?: string }): string {
  const method = (init.method ?? 'POST').toUpperCase();
  if (READS.has(method)) throw new TypeError(`${method} is a read: use read(), not ${what}()`);
  return method;
}

/** `url` if it is an absolute `http(s)` URL the gateway can POST a callback to. */
function checkedCallback(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new TypeError(`callback ${JSON.stringify(url)} is not an absolute URL: the gateway POSTs there, from elsewhere`);
  }
  if (parsed.protocol !== 'https:' && parsed.protocol !== 'http:') {
    throw new TypeError(`callback ${JSON.stringify(url)} is not an http(s) URL`);
  }
  // The gateway refuses them too: a credential would sit in its queue, and the signature proves the sender.
  if (parsed.username !== '' || parsed.password !== '') {
    throw new TypeError('a callback URL carries no user or password: the receiver checks the signature instead');
  }
  return parsed.href;
}

/** Resolves after `ms`, or rejects with `signal`'s reason as soon as it aborts. */
function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const stop = () => {
      clearTimeout(timer);
      reject(signal!.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', stop);
      resolve();
    }, ms);
    signal?.addEventListener('abort', stop, { once: true });
  });
}

function checkedKey(what: string, init: WriteInit | undefined): string {
  const key: unknown = init?.key;
  if (typeof key !== 'string' || key === '') {
    throw new TypeError(
      `${what}() needs { key }: made once per user action and stored, or use writeOnce() for a write without one`,
    );
  }
  return key;
}

/**
 * `response` if it is the upstream's; throws if it is the gateway's own
 * problem, which `Ballast-Problem` marks (an upstream may answer
 * `application/problem+json` too).
 */
async function passOrThrow(response: Response, context: ErrorContext): Promise<Response> {
  const reason = response.headers.get('ballast-problem');
  if (reason === null) return response;
  let problem: Problem;
  try {
    problem = (await response.json()) as Problem;
    if (typeof problem?.ballast?.reason !== 'string') throw new TypeError('not a ballast problem');
  } catch {
    // The header is the gateway's word; a body cut short does not change it.
    problem = {
      status: response.status,
      ballast: { reason: reason as Problem['ballast']['reason'], attempts: attemptsOf(response) ?? 0 },
    };
  }
  const retryAfter = response.headers.get('retry-after');
  throw problemError(response.status, problem, retryAfter === null ? undefined : Number(retryAfter), context);
}
