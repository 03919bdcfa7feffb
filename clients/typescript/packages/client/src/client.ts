import { problemError, type ErrorContext, type Problem } from './error.js';
import type { IdempotencyKey } from './key.js';
import { traceHeaders } from './trace.js';

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
 * What `writeOrDefer` did: the upstream answered (`deferred: false`), or the
 * gateway's durable queue holds the write, to be followed with
 * `task(taskId)`.
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
    };

/** The states of a deferred write. */
export type TaskState = 'pending' | 'running' | 'completed' | 'failed' | 'cancelled';

/** A deferred write's state, as `GET /tasks/{handle}` shows it. */
export interface Task {
  task_id: string;
  system: string | null;
  state: TaskState;
  /** Durable attempts made so far. */
  attempts: number;
  /** Durable attempts before it is failed and an operator alerted. */
  max_attempts: number;
  last_error: string | null;
  /** When it is (or was) due, seconds since the Unix epoch. */
  run_at: number;
  /** Once delivered: the upstream's final status. */
  result?: { status: number };
}

/** One external system as `/health/ready` reports it. */
export interface SystemHealth {
  system: string;
  /** Whether readiness depends on it. */
  critical: boolean;
  state: 'closed' | 'half_open' | 'open' | 'isolated' | null;
  since_secs: number | null;
  next_probe_in_secs: number | null;
}

/** `ballast serve`'s readiness (`/health/ready`). */
export interface Readiness {
  /** No critical system's breaker is open and the queue database answers. */
  ready: boolean;
  systems: SystemHealth[];
  queue: { reachable: boolean; error?: string; checked_at?: number };
}

/** Where the gateway is and how to talk to it. */
export interface ClientOptions {
  /** The gateway, as `ballast serve` prints it (default {@link DEFAULT_GATEWAY_URL}). */
  baseUrl?: string;
  /**
   * Sent as `Authorization: Bearer <token>` when the gateway asks for one
   * (`[gateway] token_env`, at least 16 bytes).
   */
  token?: string;
  /** The admin listener, for {@link BallastClient.readiness} (default {@link DEFAULT_ADMIN_URL}). */
  adminUrl?: string;
  /** The admin token, when `[serve] protect_metrics` asks for it on `/health/*`. */
  adminToken?: string;
  /** The `fetch` to use (default the global one). */
  fetch?: typeof fetch;
}

const READS: ReadonlySet<string> = new Set<ReadMethod>(['GET', 'HEAD', 'OPTIONS']);

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
 *
 * It never retries, never times out on its own and never follows a redirect:
 * the gateway's retry loop is the only one (R-RES-RE-X4). Do not wrap its
 * calls in another retry (cockatiel, axios-retry, RxJS `retry()`).
 *
 * Answers: the upstream's own answer comes back as the `Response` it was, a
 * 4xx or a 5xx included — branch on `response.status`. When the gateway
 * answers itself, the call throws a {@link BallastError}. When the gateway
 * cannot be reached, `fetch`'s own `TypeError` is thrown: for a write the
 * outcome is then unknown — repeat a keyed write later with the same key.
 *
 * @example
 * const ballast = new BallastClient({ baseUrl: 'http://127.0.0.1:9465' });
 * const order = await (await ballast.read('sber', 'orders/42')).json();
 * const paid = await ballast.write('sber', 'payments/register', { key: order.paymentKey, json: { amount: 100 } });
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
   * A read (GET by default, HEAD or OPTIONS), retried by the gateway on
   * transient failures.
   *
   * @param system the system's name in `ballast.toml`
   * @param path relative to the system's `base_url`, with its query if any
   * @returns the upstream's answer, whatever its status
   */
  async read(system: string, path: string, init: ReadInit = {}): Promise<Response> {
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
  async write(system: string, path: string, init: WriteInit): Promise<Response> {
    const key = checkedKey('write', init);
    return this.#call(system, path, writeMethod('write', init), init, { 'idempotency-key': key });
  }

  /**
   * A keyed write the gateway may defer: if its in-memory attempts cannot
   * finish it (or the breaker is open), the gateway's durable queue takes it
   * over with the same key and keeps trying; follow it with
   * {@link task}. Only a system with `dedupes_by_key = true` defers; others
   * answer as {@link write} does.
   */
  async writeOrDefer(system: string, path: string, init: WriteInit): Promise<Handover> {
    const key = checkedKey('writeOrDefer', init);
    const own = { 'idempotency-key': key, prefer: 'respond-async' };
    const response = await this.#call(system, path, writeMethod('writeOrDefer', init), init, own);
    const applied = response.headers.get('preference-applied') ?? '';
    // A 202 of the upstream's own is its answer, not a hand-over.
    if (response.status !== 202 || !/(^|[\s,])respond-async\b/i.test(applied)) {
      return { deferred: false, response };
    }
    const { task_id: taskId } = (await response.json()) as { task_id: string | null };
    return { deferred: true, taskId, location: response.headers.get('location'), attempts: attemptsOf(response) };
  }

  /**
   * A write without a key (POST by default): sent exactly once, never
   * retried — if its answer is lost, the outcome is unknown (R-RES-RE-X1).
   *
   * @returns the upstream's answer, whatever its status
   */
  async writeOnce(system: string, path: string, init: WriteOnceInit = {}): Promise<Response> {
    if ((init as { key?: unknown }).key !== undefined) {
      throw new TypeError('writeOnce() sends no key: use write() for a keyed write');
    }
    return this.#call(system, path, writeMethod('writeOnce', init), init, {});
  }

  /**
   * Where a deferred write stands.
   *
   * @param taskId the handle a deferred {@link writeOrDefer} gave
   * @throws BallastError `not_found` for a handle the gateway does not know
   */
  async task(taskId: string): Promise<Task> {
    const url = `${this.#base}/tasks/${encodeURIComponent(taskId)}`;
    const response = await this.#send(url, 'GET', {}, {}, { taskId });
    return (await response.json()) as Task;
  }

  /**
   * `ballast serve`'s readiness from its admin listener (`/health/ready`):
   * ready unless a critical system's breaker is open or the queue database
   * does not answer.
   *
   * @throws Error when the listener answers something else (401: `adminToken` missing)
   */
  async readiness(signal?: AbortSignal): Promise<Readiness> {
    const headers = new Headers({ accept: 'application/json' });
    if (this.#adminToken !== undefined) headers.set('authorization', `Bearer ${this.#adminToken}`);
    const url = `${this.#admin}/health/ready`;
    const response = await this.#fetch(url, { headers, redirect: 'manual', ...(signal ? { signal } : {}) });
    // 503 is an answer too: not ready, and the body says why.
    if (response.status !== 200 && response.status !== 503) {
      throw new Error(`GET ${url} answered ${response.status}: ${(await response.text()).trim()}`);
    }
    return (await response.json()) as Readiness;
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
    return passOrThrow(await this.#fetch(url, request), context);
  }
}

/** A client of the gateway: `new BallastClient(options)`. */
export function createBallastClient(options: ClientOptions = {}): BallastClient {
  return new BallastClient(options);
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
