/**
 * The gateway's callbacks: when a deferred write whose request carried
 * `Ballast-Callback` ends — completed, or failed for good — the gateway's
 * worker POSTs a signed event to that URL, itself a durable task: a 2xx
 * ends it; a 5xx, 408, 429 or no answer is tried again with the queue's
 * backoff; any other 4xx fails it, and the gateway alerts. {@link
 * verifyCallback} is the receiver's side: it checks the signature before
 * anything in the body is believed.
 */

import { createHmac, timingSafeEqual } from 'node:crypto';

import type { Task } from './client.js';

/** The request header naming where the gateway POSTs a deferred write's end (`writeOrDefer`'s `callback`). */
export const CALLBACK_HEADER = 'ballast-callback';

/** The callback's signature: `t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>." + body)>`. */
export const SIGNATURE_HEADER = 'ballast-signature';

/**
 * The callback's own id: the same on every retry of one callback, another on
 * every other callback. A receiver dedupes by it — the gateway delivers at
 * least once. It is sent as `Idempotency-Key` too.
 */
export const DELIVERY_HEADER = 'ballast-delivery';

/** The handle of the task a callback is about (the body's `task.task_id`). */
export const TASK_HEADER = 'ballast-task';

/** How far a callback's timestamp may be from now before it is refused as a replay, in seconds. */
export const DEFAULT_CALLBACK_TOLERANCE_SEC = 300;

/** How a deferred write ended, as a callback's `type` says it (`task.cancelled`: for a gateway that reports cancellations). */
export type CallbackType = 'task.completed' | 'task.failed' | 'task.cancelled';

/**
 * A callback's body: how the deferred write ended and the task as
 * `GET /tasks/{handle}` would show it then (its `result`, the upstream's
 * answer, for a completed one and for one a 4xx failed).
 */
export interface CallbackEvent {
  type: CallbackType;
  task: Task;
}

/** What {@link verifyCallback} takes: the secret, and the request exactly as it came. */
export interface VerifyCallbackInit {
  /**
   * The secret shared with the gateway: the value of the environment
   * variable its `[gateway] callback_secret_env` names.
   */
  secret: string | Uint8Array;
  /** The `Ballast-Signature` header's value (missing: refused as forged). */
  signature: string | null | undefined;
  /**
   * The request body as it arrived, byte for byte — not `JSON.stringify` of
   * a parsed body, whose bytes differ (key order, spacing, escapes). A string
   * is taken as UTF-8.
   */
  body: string | Uint8Array;
  /** How far the signature's timestamp may be from `now`, in seconds (default 300). */
  toleranceSec?: number;
  /** The time to judge the timestamp by (default the clock; a number is ms since the epoch, as `Date.now()`). */
  now?: Date | number;
}

/**
 * A callback that is not the gateway's, or not now: answer it 401 and act on
 * nothing in it.
 *
 * - `forged`: no signature, a header that is not `t=…,v1=…`, or no `v1` that
 *   is the HMAC of this body under the secret — the body was changed, the
 *   secret differs, or someone else sent it;
 * - `stale`: a genuine signature whose timestamp is more than `toleranceSec`
 *   from now — a recorded callback replayed, or a clock far off.
 */
export class CallbackSignatureError extends Error {
  override name = 'CallbackSignatureError';
  /** `forged` or `stale`. */
  readonly kind: 'forged' | 'stale';
  /** The signature's timestamp, seconds since the epoch, when it had one. */
  readonly timestamp: number | undefined;

  constructor(kind: 'forged' | 'stale', message: string, timestamp?: number) {
    super(message);
    this.kind = kind;
    this.timestamp = timestamp;
  }
}

/**
 * The event in a callback, once its signature is the gateway's and recent.
 *
 * Checks `Ballast-Signature` — the HMAC-SHA256 of `"<t>." + body` under the
 * shared secret, compared in constant time — then its timestamp, and only
 * then parses the body. A signature with several `v1` values (a secret being
 * rotated) passes when one of them matches.
 *
 * A genuine callback can come more than once: the gateway retries until a
 * 2xx, and a 2xx lost on the way back is retried too. Dedupe by its
 * `Ballast-Delivery` header (the same on every retry of one callback), or
 * make what it triggers idempotent — best both.
 *
 * @example
 * // Express, with the body kept raw: app.post('/ballast/callbacks', express.raw({ type: 'application/json' }), …)
 * const event = verifyCallback({
 *   secret: process.env.BALLAST_CALLBACK_SECRET!,
 *   signature: req.get('ballast-signature'),
 *   body: req.body, // a Buffer
 * });
 * if (!(await seen(req.get('ballast-delivery')))) await reconcile(event.task);
 * res.sendStatus(204);
 *
 * @throws CallbackSignatureError when the signature is missing, malformed, wrong or stale
 * @throws TypeError when the secret is empty, or the genuine body is not a callback event
 */
export function verifyCallback(init: VerifyCallbackInit): CallbackEvent {
  const secret = secretBytes(init.secret);
  const tolerance = init.toleranceSec ?? DEFAULT_CALLBACK_TOLERANCE_SEC;
  if (!(tolerance >= 0)) throw new TypeError(`toleranceSec must be 0 or more, not ${tolerance}`);
  const { timestamp, signatures } = parseSignature(init.signature);
  const body = typeof init.body === 'string' ? Buffer.from(init.body, 'utf8') : init.body;

  const expected = hmac(secret, timestamp, body);
  // Every candidate is compared, matched or not: the time taken says nothing about which one matched.
  let genuine = false;
  for (const candidate of signatures) {
    if (candidate.length === expected.length && timingSafeEqual(candidate, expected)) genuine = true;
  }
  if (!genuine) {
    throw new CallbackSignatureError(
      'forged',
      `${SIGNATURE_HEADER} does not match the body: not signed with this secret, or the body was changed`,
      timestamp,
    );
  }
  const now = init.now === undefined ? Date.now() : typeof init.now === 'number' ? init.now : init.now.getTime();
  const age = now / 1000 - timestamp;
  if (Math.abs(age) > tolerance) {
    throw new CallbackSignatureError(
      'stale',
      `${SIGNATURE_HEADER} was made ${Math.round(Math.abs(age))} s ${age >= 0 ? 'ago' : 'ahead'}, ` +
        `more than the ${tolerance} s allowed: a replay, or a clock off`,
      timestamp,
    );
  }
  return callbackEvent(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'));
}

/**
 * A `Ballast-Signature` value for `body`, as the gateway makes it: for tests
 * of a receiver, which need callbacks the gateway would send.
 *
 * @param timestamp seconds since the epoch (default now)
 * @example
 * const body = JSON.stringify({ type: 'task.completed', task });
 * await receiver.post('/ballast/callbacks', body, { 'ballast-signature': signCallback('s3cret', body) });
 */
export function signCallback(secret: string | Uint8Array, body: string | Uint8Array, timestamp?: number): string {
  const t = timestamp ?? Math.floor(Date.now() / 1000);
  if (!Number.isSafeInteger(t) || t < 0) throw new TypeError(`a timestamp is whole seconds since the epoch, not ${t}`);
  const bytes = typeof body === 'string' ? Buffer.from(body, 'utf8') : body;
  return `t=${t},v1=${hmac(secretBytes(secret), t, bytes).toString('hex')}`;
}

function hmac(secret: Uint8Array, timestamp: number, body: Uint8Array): Buffer {
  return createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest();
}

function secretBytes(secret: string | Uint8Array): Uint8Array {
  const bytes = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : secret;
  // An empty key would verify whatever anyone signs with an empty key.
  if (!bytes || bytes.length === 0) {
    throw new TypeError('the callback secret is empty: set the variable [gateway] callback_secret_env names');
  }
  return bytes;
}

/** `t` and every `v1` of a `Ballast-Signature`; other schemes' entries are skipped. */
function parseSignature(header: string | null | undefined): { timestamp: number; signatures: Buffer[] } {
  if (typeof header !== 'string' || header.trim() === '') {
    throw new CallbackSignatureError('forged', `no ${SIGNATURE_HEADER} header: not a callback of the gateway`);
  }
  let timestamp: number | undefined;
  const signatures: Buffer[] = [];
  for (const part of header.split(',')) {
    const at = part.indexOf('=');
    if (at < 0) return malformed(header);
    const name = part.slice(0, at).trim();
    const value = part.slice(at + 1).trim();
    if (name === 't') {
      if (timestamp !== undefined || !/^\d{1,15}$/.test(value)) return malformed(header);
      timestamp = Number(value);
    } else if (name === 'v1') {
      if (!/^[0-9a-fA-F]{64}$/.test(value)) return malformed(header);
      signatures.push(Buffer.from(value, 'hex'));
    }
  }
  if (timestamp === undefined || signatures.length === 0) return malformed(header);
  return { timestamp, signatures };
}

function malformed(header: string): never {
  const shown = header.length > 120 ? `${header.slice(0, 120)}…` : header;
  throw new CallbackSignatureError(
    'forged',
    `${SIGNATURE_HEADER} is not "t=<unix seconds>,v1=<64 hex digits>": ${JSON.stringify(shown)}`,
  );
}

const TYPES: ReadonlySet<string> = new Set<CallbackType>(['task.completed', 'task.failed', 'task.cancelled']);

function callbackEvent(text: string): CallbackEvent {
  const event = JSON.parse(text) as Partial<CallbackEvent> | null;
  if (
    typeof event !== 'object' ||
    event === null ||
    !TYPES.has(String(event.type)) ||
    typeof event.task !== 'object' ||
    event.task === null ||
    typeof event.task.task_id !== 'string'
  ) {
    throw new TypeError(`a signed body that is not a callback event: ${text.slice(0, 200)}`);
  }
  return event as CallbackEvent;
}
