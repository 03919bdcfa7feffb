import { brand, hasKind, isInstance } from './brand.js';
import type { Task } from './client.js';

/**
 * Why the gateway answered itself instead of passing on the upstream's
 * answer: its problem document's `ballast.reason` (ballast-server's
 * `gateway::problem::Reason`).
 *
 * | reason | status | what it means |
 * |---|---|---|
 * | `breaker_open`, `bulkhead_full` | 503 + `Retry-After` | fail fast: the system is unavailable for now |
 * | `budget_exhausted` | 503 + `Retry-After` | the system's retry budget had no retry left |
 * | `rate_limited` | 503 + `Retry-After` | the system's rate limit had no permit; the next frees after `Retry-After` |
 * | `timeout` | 504 | an attempt or the whole call timed out |
 * | `transport` | 502 | no complete answer after the last attempt (`sent` says whether it may have arrived) |
 * | `answer_too_large` | 502 | the system's answer was larger than `[gateway] max_answer`: the request was sent (`sent: true`); a keyed write may be resent with its key |
 * | `tls_untrusted`, `tls_expired`, `tls_name_mismatch`, `tls_client_cert_refused`, `tls_protocol` | 502 | the TLS handshake with the system failed: nothing was sent, and it was not retried (R-RES-RE-X2); the detail names the `[systems.NAME.tls]` key that fixes it |
 * | `proxy_refused` | 502 + `Retry-After` | the egress proxy could not be reached or refused the tunnel: nothing reached the system, safe to send again |
 * | `proxy_auth_required` | 502 | the egress proxy wants credentials (`proxy_auth_env`) |
 * | `token_unavailable` | 503 + `Retry-After` | no OAuth 2.0 token for the system (its token endpoint down): nothing was sent |
 * | `token_refused` | 502 | the token endpoint refused the gateway's client credentials |
 * | `unknown_system`, `not_found` | 404 | no such system; no deferred write of that handle, or a path the gateway does not serve |
 * | `bad_key`, `bad_path`, `bad_request`, `seal_key_missing` | 400 | refused unsent |
 * | `key_required` | 400 | the route is declared `keyed_write` and the write carried no key: refused unsent (R-RES-RE-1) |
 * | `key_reused` | 422 | the key already names another request (another method, path, body or content type) in flight, deferred, or sent within the key's life (`key_ttl`): refused unsent (R-RES-RE-1) |
 * | `sequence_pending` | 409 | an earlier write of the request's `Ballast-Sequence` waits in the queue: not sent, so it cannot overtake it (defer it with `Prefer: respond-async` to queue it behind) |
 * | `unrouted` | 400 | a write no route of the system declares: refused unsent (R-RES-RE-1) |
 * | `bad_callback` | 400 | `Ballast-Callback` names a host not in `[gateway] callback_hosts` (or callbacks are not configured): refused unsent |
 * | `method_not_allowed` | 405 | `TRACE` or `CONNECT`: never forwarded |
 * | `too_large`, `body_timeout` | 413, 408 | the request body was too large or too slow |
 * | `loop_detected` | 508 | the system's `base_url` points back at the gateway |
 * | `cross_site`, `unauthorized`, `unknown_host` | 403, 401, 421 | refused before anything else |
 * | `token_throttled` | 429 + `Retry-After` | too many wrong tokens lately: refused before the token is looked at |
 * | `queue_unavailable` | 503 | a write to defer could not be stored |
 * | `too_many_waiters` | 503 + `Retry-After` | `GET /tasks/{handle}?wait=` while the listener holds as many waiting requests as it may ({@link BallastClient.waitForTask} waits `Retry-After` and asks again) |
 * | `internal` | 500 | the gateway failed midway through a deferral: whether the write arrived is unknown |
 * | `draining` | 503 + `Retry-After` | the gateway was shutting down and the call did not finish in time: a read may be asked again (another replica), a keyed write resent with its key; any other write's outcome is unknown (`sent: true`, `call_id`) |
 */
export type Reason = (typeof REASONS)[number];

/** Every {@link Reason}, in the order of the table above. */
export const REASONS = [
  'breaker_open',
  'bulkhead_full',
  'budget_exhausted',
  'rate_limited',
  'timeout',
  'transport',
  'answer_too_large',
  'tls_untrusted',
  'tls_expired',
  'tls_name_mismatch',
  'tls_client_cert_refused',
  'tls_protocol',
  'proxy_refused',
  'proxy_auth_required',
  'token_unavailable',
  'token_refused',
  'unknown_system',
  'bad_key',
  'key_required',
  'key_reused',
  'sequence_pending',
  'unrouted',
  'method_not_allowed',
  'bad_path',
  'loop_detected',
  'body_timeout',
  'bad_callback',
  'cross_site',
  'seal_key_missing',
  'too_large',
  'bad_request',
  'unknown_host',
  'unauthorized',
  'token_throttled',
  'not_found',
  'queue_unavailable',
  'too_many_waiters',
  'internal',
  'draining',
] as const;

/** The reasons that mean "the system is unavailable now; ask again after `retryAfter`". */
export type UnavailableReason = Extract<
  Reason,
  'breaker_open' | 'bulkhead_full' | 'budget_exhausted' | 'rate_limited'
>;

const UNAVAILABLE: ReadonlySet<string> = new Set<UnavailableReason>([
  'breaker_open',
  'bulkhead_full',
  'budget_exhausted',
  'rate_limited',
]);

/** The gateway's own answer: an `application/problem+json` document (RFC 9457). */
export interface Problem {
  title?: string;
  status?: number;
  detail?: string;
  ballast: {
    reason: Reason;
    /** Attempts made on the system (0: nothing was sent). */
    attempts: number;
    /** The rule that decided the outcome, e.g. `R-RES-RE-X1`. */
    rule?: string;
    /** For `transport` and the TLS, proxy and token reasons: whether the request may have reached the system. */
    sent?: boolean;
    /** The route of `ballast.toml` the request matched, `POST /payments`, when it matched one. */
    route?: string;
    /** For a write whose outcome is unknown (`draining`): the id the gateway's log names it by. */
    call_id?: string;
  };
}

/** Where a {@link BallastError} came from, besides the problem itself. */
export interface ErrorContext {
  /** The system that was called, for a call. */
  system?: string;
  /** The handle asked for, for {@link BallastClient.task} and {@link BallastClient.waitForTask}. */
  taskId?: string;
}

/**
 * The gateway answered itself: there is no upstream answer to pass on.
 * Branch on {@link reason}; a breaker open, a bulkhead full or a spent retry
 * budget is the subclass {@link SystemUnavailableError}.
 *
 * `instanceof BallastError` and {@link isBallastError} hold for an error of
 * any copy of this package loaded in the process (see the README's
 * "One class, two module systems").
 */
export class BallastError extends Error {
  override name = 'BallastError';
  /** The HTTP status of the gateway's answer. */
  readonly status: number;
  /** Why the gateway answered itself. */
  readonly reason: Reason;
  /** Attempts made on the system before the gateway gave up (0: nothing was sent). */
  readonly attempts: number;
  /** The rule that decided the outcome, e.g. `R-RES-RE-X1`, if one did. */
  readonly rule: string | undefined;
  /**
   * For `transport`: `false` when the connection never opened, so nothing
   * can have been applied; `true` when the request may have arrived.
   */
  readonly sent: boolean | undefined;
  /** Seconds the gateway suggests waiting (its `Retry-After`), when it says. */
  readonly retryAfter: number | undefined;
  /** The system that was called, for a call. */
  readonly system: string | undefined;
  /** The handle of the deferred write asked for, for `task()` and `waitForTask()`. */
  readonly taskId: string | undefined;
  /** The whole problem document. */
  readonly problem: Problem;

  constructor(status: number, problem: Problem, retryAfter: number | undefined, context: ErrorContext = {}) {
    super(`${problem.ballast.reason}: ${problem.detail ?? problem.title ?? status}`);
    this.status = status;
    this.reason = problem.ballast.reason;
    this.attempts = problem.ballast.attempts;
    this.rule = problem.ballast.rule;
    this.sent = problem.ballast.sent;
    this.retryAfter = retryAfter;
    this.system = context.system;
    this.taskId = context.taskId;
    this.problem = problem;
  }

  /** Made by this class in any copy of the package. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isInstance(this, value);
  }
}

/**
 * The system is unavailable for now — its breaker is open, its bulkhead full
 * or its retry budget spent — and the gateway failed fast without waiting:
 * cockatiel's `BrokenCircuitError` and `BulkheadRejectedError`, which the
 * guide's adapters turn into `PaymentPortError.systemUnavailable`. Nothing
 * more was sent; {@link retryAfter} says when asking again may help.
 */
export class SystemUnavailableError extends BallastError {
  override name = 'SystemUnavailableError';
  declare readonly reason: UnavailableReason;
}

/**
 * {@link BallastClient.waitForTask} gave up: its `timeoutMs` passed while the
 * deferred write was still pending or running. The write goes on — the
 * gateway's queue keeps trying it — so this says nothing about its outcome;
 * ask again later with the same handle, or let its callback tell you.
 */
export class TaskWaitTimeoutError extends Error {
  override name = 'TaskWaitTimeoutError';
  /** The handle waited for. */
  readonly taskId: string;
  /** How long it was waited for, in ms. */
  readonly timeoutMs: number;
  /** The task as it was last seen, if it was seen at all. */
  readonly lastSeen: Task | undefined;

  constructor(taskId: string, timeoutMs: number, lastSeen: Task | undefined) {
    const state = lastSeen ? `still ${lastSeen.state} after ${lastSeen.attempts} attempts` : 'not seen';
    super(`deferred write ${taskId}: ${state} when the wait of ${timeoutMs} ms ended`);
    this.taskId = taskId;
    this.timeoutMs = timeoutMs;
    this.lastSeen = lastSeen;
  }

  /** Made by this class in any copy of the package. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isInstance(this, value);
  }
}

brand(BallastError, ['BallastError']);
brand(SystemUnavailableError, ['BallastError', 'SystemUnavailableError']);
brand(TaskWaitTimeoutError, ['TaskWaitTimeoutError']);

/**
 * Whether `error` is the gateway's own answer ({@link BallastError}, a
 * {@link SystemUnavailableError} included), by its brand: true for an error
 * of any copy of `@ballast/client` — the ES module and the CommonJS entry, a
 * second version nested under a library — where an `instanceof` of a class
 * from another copy would be false.
 *
 * @example
 * catch (e) {
 *   if (isBallastError(e) && e.reason === 'key_reused') throw new ConflictException(e.message);
 *   throw e;
 * }
 */
export function isBallastError(error: unknown): error is BallastError {
  return hasKind(error, 'BallastError');
}

/**
 * Whether `error` says the system is unavailable now — breaker open,
 * bulkhead full, retry budget spent, rate limit — so nothing more was sent
 * and asking again after its `retryAfter` may help: the guide's "system
 * unavailable". By brand, as {@link isBallastError}.
 *
 * @example
 * if (isSystemUnavailable(e)) throw PaymentPortError.systemUnavailable('sber', e);
 */
export function isSystemUnavailable(error: unknown): error is SystemUnavailableError {
  return hasKind(error, 'SystemUnavailableError');
}

/** The error for a gateway's problem: a {@link SystemUnavailableError} when it says so. */
export function problemError(
  status: number,
  problem: Problem,
  retryAfter: number | undefined,
  context: ErrorContext,
): BallastError {
  return UNAVAILABLE.has(problem.ballast.reason)
    ? new SystemUnavailableError(status, problem, retryAfter, context)
    : new BallastError(status, problem, retryAfter, context);
}
