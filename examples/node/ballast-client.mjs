/**
 * A client for the outbound gateway of `ballast serve`: every call to an
 * external system goes to `{baseUrl}/call/{system}/{path}` and through that
 * system's policy in `ballast.toml` — retry, breaker, bulkhead, timeout, the
 * durable queue.
 *
 * The method you call declares what the request is (R-RES-RE-1):
 *
 * - `read`: GET, HEAD or OPTIONS; the gateway retries it on transient failures.
 * - `write`: any other method with the `Idempotency-Key` you pass; retried
 *   with that same key only if the system deduplicates by key.
 * - `writeOrDefer`: the same write, which the gateway may hand to its durable
 *   queue (`Prefer: respond-async`) when its in-memory attempts cannot finish it.
 * - `writeOnce`: a write without a key; sent exactly once (R-RES-RE-X1).
 *
 * This client never retries, never times out on its own and never follows a
 * redirect: the gateway's retry loop is the only one (R-RES-RE-X4). Do not
 * wrap its calls in another retry (cockatiel, axios-retry, RxJS `retry()`).
 *
 * Answers: the upstream's own answer comes back as the `Response` it was,
 * a 4xx or a 5xx included — branch on `response.status`. When the gateway
 * answers itself (breaker open, transport failure after the last attempt,
 * unknown system…) the call throws a {@link BallastError}. When the gateway
 * cannot be reached, `fetch`'s own `TypeError` is thrown: for a write, the
 * outcome is then unknown — repeat a keyed write later with the same key.
 *
 * Plain ES module, no dependencies; Node 18 or newer (global `fetch`).
 *
 * @example
 * import { randomUUID } from 'node:crypto';
 * import { createBallastClient } from './ballast-client.mjs';
 *
 * const ballast = createBallastClient();                   // http://127.0.0.1:9465
 * const order = await (await ballast.read('sber', 'orders/42')).json();
 * const key = order.paymentKey ?? randomUUID();           // once per user action, stored with the order
 * const paid = await ballast.write('sber', 'payments/register', { key, json: { amount: 100 } });
 *
 * @module ballast-client
 */

import { createHash } from 'node:crypto';

/**
 * Why the gateway answered itself, as its problem document's
 * `ballast.reason` says.
 *
 * @typedef {'breaker_open' | 'bulkhead_full' | 'budget_exhausted' | 'timeout' | 'transport'
 *   | 'unknown_system' | 'bad_key' | 'too_large' | 'bad_request' | 'unauthorized'
 *   | 'not_found' | 'queue_unavailable'} Reason
 */

/**
 * What a call sends besides its method and URL.
 *
 * @typedef {object} CallInit
 * @property {string} [method] the HTTP method (reads default to GET, writes to POST)
 * @property {HeadersInit} [headers] sent on to the system, except hop-by-hop ones;
 *   never `Idempotency-Key` (pass `key` to a write instead)
 * @property {BodyInit} [body] the request body, sent as is
 * @property {unknown} [json] a body to send as JSON (instead of `body`)
 * @property {AbortSignal} [signal] stops waiting; the gateway then drops the call
 */

/**
 * A keyed write: `key` is made once per user action and stored with it
 * (`crypto.randomUUID()` or {@link keyFor}), never once per attempt.
 *
 * @typedef {CallInit & { key: string }} WriteInit
 */

/**
 * What `writeOrDefer` did: the upstream answered (`deferred: false`), or the
 * gateway's durable queue holds the write under `taskId` (`deferred: true`).
 *
 * @typedef {{ deferred: false, response: Response }
 *   | { deferred: true, taskId: number, location: string, attempts: number | undefined }} Handover
 */

/**
 * A deferred write's state, as `GET /tasks/{id}` shows it.
 *
 * @typedef {object} Task
 * @property {number} task_id
 * @property {string | null} system
 * @property {'pending' | 'running' | 'completed' | 'failed' | 'cancelled'} state
 * @property {number} attempts durable attempts made so far
 * @property {number} max_attempts durable attempts before it is failed and an operator alerted
 * @property {string | null} last_error
 * @property {number} run_at when it is (or was) due, seconds since the Unix epoch
 */

/** The header on every gateway response: the attempts the call made. */
export const ATTEMPTS_HEADER = 'ballast-attempts';

const READS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * The gateway's own answer: an `application/problem+json` document whose
 * `ballast` member says why it answered instead of the upstream.
 */
export class BallastError extends Error {
  /**
   * @param {number} status the HTTP status of the gateway's answer
   * @param {{ title?: string, detail?: string, ballast: { reason: Reason, attempts: number, rule?: string } }} problem
   * @param {number | undefined} retryAfter `Retry-After`, in seconds
   */
  constructor(status, problem, retryAfter) {
    super(`${problem.ballast.reason}: ${problem.detail ?? problem.title ?? status}`);
    this.name = 'BallastError';
    /** The HTTP status of the gateway's answer. */
    this.status = status;
    /** @type {Reason} why the gateway answered itself: branch on this */
    this.reason = problem.ballast.reason;
    /** Attempts made on the system before the gateway gave up (0: nothing was sent). */
    this.attempts = problem.ballast.attempts;
    /** The rule that decided the outcome, e.g. `R-RES-RE-X1`, if one did. */
    this.rule = problem.ballast.rule;
    /** Seconds the gateway suggests waiting (`breaker_open`, `bulkhead_full`, `budget_exhausted`). */
    this.retryAfter = retryAfter;
    /** The whole problem document. */
    this.problem = problem;
  }
}

/**
 * The attempts the gateway made for `response` (its `Ballast-Attempts`).
 *
 * @param {Response} response
 * @returns {number | undefined}
 */
export function attemptsOf(response) {
  const value = response.headers.get(ATTEMPTS_HEADER);
  return value === null ? undefined : Number(value);
}

/**
 * A deterministic key for one operation on one entity: the same UUID v5 as
 * ballast's Rust `IdempotencyKey::v5(entityId, operation)`, so services in
 * either language derive the same key. Use it when the operation happens at
 * most once per entity ("pay order 42"); when it may legitimately happen
 * again (a second payment attempt with another card), make a fresh
 * `crypto.randomUUID()` for each user action and store it instead.
 *
 * @param {string | number} entityId
 * @param {string} operation
 * @returns {string}
 */
export function keyFor(entityId, operation) {
  const entity = String(entityId);
  // The length prefix keeps ('a/b', 'c') and ('a', 'b/c') apart.
  return uuidV5(KEY_NAMESPACE, `${Buffer.byteLength(entity)}:${entity}${operation}`);
}

/**
 * A client of the gateway at `baseUrl`.
 *
 * @param {object} [options]
 * @param {string} [options.baseUrl] the gateway, as `ballast serve` prints it
 *   (default `http://127.0.0.1:9465`)
 * @param {string} [options.token] sent as `Authorization: Bearer <token>` when
 *   the gateway asks for one (`[gateway] token_env`); the gateway keeps that
 *   header for itself, so it replaces any `Authorization` of a call's
 * @param {typeof fetch} [options.fetch] the `fetch` to use (default the global one)
 */
export function createBallastClient({ baseUrl = 'http://127.0.0.1:9465', token, fetch = globalThis.fetch } = {}) {
  const base = baseUrl.replace(/\/+$/, '');

  /**
   * @param {string} url
   * @param {string} method
   * @param {CallInit} init
   * @param {Record<string, string>} own headers this client sets
   */
  async function send(url, method, init, own) {
    const headers = new Headers(init.headers);
    if (headers.has('idempotency-key')) {
      throw new TypeError('pass the Idempotency-Key as write(system, path, { key }), not as a header');
    }
    for (const [name, value] of Object.entries(own)) headers.append(name, value);
    if (token !== undefined) headers.set('authorization', `Bearer ${token}`);
    let body = init.body;
    if (init.json !== undefined) {
      if (body !== undefined) throw new TypeError('pass either body or json, not both');
      body = JSON.stringify(init.json);
      if (!headers.has('content-type')) headers.set('content-type', 'application/json');
    }
    // `manual`: a redirect is the upstream's answer; following it would send
    // the request again, outside the gateway.
    const response = await fetch(url, { method, headers, body, signal: init.signal, redirect: 'manual' });
    return passOrThrow(response);
  }

  /**
   * @param {string} system
   * @param {string} path
   */
  function callUrl(system, path) {
    if (typeof system !== 'string' || system === '') throw new TypeError('name the system to call');
    return `${base}/call/${encodeURIComponent(system)}/${String(path).replace(/^\/+/, '')}`;
  }

  /**
   * @param {string} what
   * @param {CallInit} init
   */
  function writeMethod(what, init) {
    const method = (init.method ?? 'POST').toUpperCase();
    if (READS.has(method)) throw new TypeError(`${method} is a read: use read(), not ${what}()`);
    return method;
  }

  /**
   * @param {string} what
   * @param {WriteInit} init
   */
  function checkedKey(what, init) {
    if (typeof init?.key !== 'string' || init.key === '') {
      throw new TypeError(
        `${what}() needs { key }: made once per user action and stored, or use writeOnce() for a write without one`,
      );
    }
    return init.key;
  }

  return {
    /**
     * A read (GET, HEAD or OPTIONS), retried by the gateway on transient failures.
     *
     * @param {string} system the system's name in `ballast.toml`
     * @param {string} path relative to the system's `base_url`, with its query if any
     * @param {CallInit} [init]
     * @returns {Promise<Response>} the upstream's answer, whatever its status
     */
    async read(system, path, init = {}) {
      const method = (init.method ?? 'GET').toUpperCase();
      if (!READS.has(method)) {
        throw new TypeError(`${method} is not a read: use write() with a key, or writeOnce()`);
      }
      return send(callUrl(system, path), method, init, {});
    },

    /**
     * A keyed write (POST by default): the gateway retries it with the same
     * key if the system deduplicates by key, and sends it once otherwise.
     *
     * @param {string} system
     * @param {string} path
     * @param {WriteInit} init
     * @returns {Promise<Response>} the upstream's answer, whatever its status
     */
    async write(system, path, init) {
      const key = checkedKey('write', init);
      return send(callUrl(system, path), writeMethod('write', init), init, { 'idempotency-key': key });
    },

    /**
     * A keyed write the gateway may defer: if its in-memory attempts cannot
     * finish it, the gateway's durable queue takes it over with the same key
     * and keeps trying; follow it with `task(taskId)`. Only a system with
     * `dedupes_by_key = true` defers; others answer as `write` does.
     *
     * @param {string} system
     * @param {string} path
     * @param {WriteInit} init
     * @returns {Promise<Handover>}
     */
    async writeOrDefer(system, path, init) {
      const key = checkedKey('writeOrDefer', init);
      const own = { 'idempotency-key': key, prefer: 'respond-async' };
      const response = await send(callUrl(system, path), writeMethod('writeOrDefer', init), init, own);
      const applied = response.headers.get('preference-applied') ?? '';
      if (response.status !== 202 || !/(^|[\s,])respond-async\b/i.test(applied)) {
        return { deferred: false, response };
      }
      const { task_id: taskId } = await response.json();
      const location = response.headers.get('location') ?? `/tasks/${taskId}`;
      return { deferred: true, taskId, location, attempts: attemptsOf(response) };
    },

    /**
     * A write without a key (POST by default): sent exactly once, never
     * retried — if its answer is lost, the outcome is unknown.
     *
     * @param {string} system
     * @param {string} path
     * @param {CallInit} [init]
     * @returns {Promise<Response>} the upstream's answer, whatever its status
     */
    async writeOnce(system, path, init = {}) {
      return send(callUrl(system, path), writeMethod('writeOnce', init), init, {});
    },

    /**
     * Where a deferred write stands.
     *
     * @param {number | string} taskId the `taskId` of a deferred `writeOrDefer`
     * @returns {Promise<Task>}
     */
    async task(taskId) {
      const response = await send(`${base}/tasks/${encodeURIComponent(String(taskId))}`, 'GET', {}, {});
      return response.json();
    },
  };
}

/**
 * `response` if it is the upstream's; throws if it is the gateway's own
 * problem. An upstream may answer `application/problem+json` too: only the
 * `ballast` member marks the gateway's.
 *
 * @param {Response} response
 * @returns {Promise<Response>}
 */
async function passOrThrow(response) {
  const type = response.headers.get('content-type') ?? '';
  if (!type.toLowerCase().startsWith('application/problem+json')) return response;
  let problem;
  try {
    problem = await response.clone().json();
  } catch {
    return response;
  }
  if (typeof problem?.ballast?.reason !== 'string') return response;
  const retryAfter = response.headers.get('retry-after');
  throw new BallastError(response.status, problem, retryAfter === null ? undefined : Number(retryAfter));
}

/** The namespace of ballast's keys: UUID v5 of this URL in the URL namespace (RFC 9562). */
const KEY_NAMESPACE = uuidV5('6ba7b811-9dad-11d1-80b4-00c04fd430c8', 'https://docs.rs/ballast/idempotency-key');

/**
 * A name-based UUID, version 5 (SHA-1), as RFC 9562 §5.5 defines it.
 *
 * @param {string} namespace a UUID
 * @param {string} name hashed as UTF-8
 * @returns {string} lower-case, hyphenated
 */
function uuidV5(namespace, name) {
  const hash = createHash('sha1')
    .update(Buffer.from(namespace.replaceAll('-', ''), 'hex'))
    .update(name, 'utf8')
    .digest()
    .subarray(0, 16);
  hash[6] = (hash[6] & 0x0f) | 0x50;
  hash[8] = (hash[8] & 0x3f) | 0x80;
  const hex = hash.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}
