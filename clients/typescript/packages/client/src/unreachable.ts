/**
 * The gateway itself cannot be reached: no answer at all, as opposed to a
 * {@link BallastError} (the gateway answered for the system) or the
 * system's own answer. What `fetch` throws for it — `TypeError: fetch
 * failed` — is the class of a programming error too, so the client turns it
 * into a {@link GatewayUnreachableError} that says whether the request may
 * have arrived.
 */

import { brand, hasKind, isInstance } from './brand.js';

/**
 * Error codes of a request that never left: the connection was refused, the
 * name did not resolve, no route, the connection or its TLS handshake did
 * not complete. Anything else may have reached the gateway.
 */
const NOT_SENT: ReadonlySet<string> = new Set([
  'ECONNREFUSED',
  'ENOTFOUND',
  'EAI_AGAIN',
  'EAI_FAIL',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'EADDRNOTAVAIL',
  'ENOENT',
  'UND_ERR_CONNECT_TIMEOUT',
  'ERR_TLS_CERT_ALTNAME_INVALID',
  'CERT_HAS_EXPIRED',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
]);

/** What {@link GatewayUnreachableError} is told about the request that failed. */
export interface UnreachableContext {
  /** The request's method. */
  method: string;
  /** Where it went, without its query. */
  url: string;
  /** Whether it was a write: then a request that may have arrived has an unknown outcome. */
  write: boolean;
  /** Whether the write carried a key, so that it may be repeated with it. */
  keyed?: boolean;
  /** The system called, for a call. */
  system?: string | undefined;
  /** The handle asked for, for `task()` and `waitForTask()`. */
  taskId?: string | undefined;
}

/**
 * No answer from the gateway: it is down, restarting, or the network
 * between failed. Not a bug in the call — do not fix the code, try again
 * later.
 *
 * - {@link sent} `false`: the connection never opened, nothing was sent,
 *   nothing can have been applied; the call may be made again as it was.
 * - {@link outcomeUnknown} `true`: a write that may have reached the gateway,
 *   and through it the system, before the connection broke. Repeat a keyed
 *   write later **with the same key** (the system deduplicates by it) or let
 *   the durable path take it; never make a new key for the repeat. An
 *   unkeyed write (`writeOnce`) is not repeated (R-RES-RE-X1).
 *
 * `fetch`'s own error is its {@link cause}. `instanceof` and
 * {@link isGatewayUnreachable} hold across copies of the package.
 *
 * @example
 * try {
 *   await ballast.write('sber', 'payments/register', { key, json });
 * } catch (e) {
 *   if (isGatewayUnreachable(e)) throw PaymentPortError.outcomeUnknown('sber', e); // ask again later, same key
 *   throw e;
 * }
 */
export class GatewayUnreachableError extends Error {
  override name = 'GatewayUnreachableError';
  /** Whether the request may have reached the gateway (`false`: the connection never opened). */
  readonly sent: boolean;
  /** A write that may have been applied: repeat it only with its key. */
  readonly outcomeUnknown: boolean;
  /** The network error's code (`ECONNREFUSED`, `ECONNRESET`, `UND_ERR_SOCKET`, …), when it has one. */
  readonly code: string | undefined;
  /** The request's method. */
  readonly method: string;
  /** Where it went, without its query. */
  readonly url: string;
  /** The system called, for a call. */
  readonly system: string | undefined;
  /** The handle asked for, for `task()` and `waitForTask()`. */
  readonly taskId: string | undefined;

  constructor(context: UnreachableContext, cause: unknown) {
    const code = codeOf(cause);
    const sent = code === undefined || !NOT_SENT.has(code);
    const outcome = !sent
      ? 'nothing was sent'
      : !context.write
        ? 'no answer'
        : context.keyed
          ? 'the write may have arrived, its outcome is unknown: repeat it only with the same key'
          : 'the write may have arrived, its outcome is unknown: it is not sent again (R-RES-RE-X1)';
    super(`the ballast gateway did not answer ${context.method} ${context.url} (${code ?? messageOf(cause)}): ${outcome}`, {
      cause,
    });
    this.sent = sent;
    this.outcomeUnknown = sent && context.write;
    this.code = code;
    this.method = context.method;
    this.url = context.url;
    this.system = context.system;
    this.taskId = context.taskId;
  }

  /** Made by this class in any copy of the package. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    return isInstance(this, value);
  }
}

brand(GatewayUnreachableError, ['GatewayUnreachableError']);

/**
 * Whether `error` is a {@link GatewayUnreachableError}, by its brand: true
 * for one from any copy of `@ballast/client`.
 */
export function isGatewayUnreachable(error: unknown): error is GatewayUnreachableError {
  return hasKind(error, 'GatewayUnreachableError');
}

/**
 * Whether `error`, thrown by `fetch`, means the gateway did not answer —
 * rather than the caller's abort or a request `fetch` refused to make (a bad
 * header, a bad URL), which stay as they are.
 */
export function isNetworkFailure(error: unknown): boolean {
  if (!(error instanceof Error)) return false;
  if (error.name === 'AbortError' || error.name === 'TimeoutError') return false;
  if (codeOf(error) !== undefined) return true;
  // undici's network errors, whatever their cause: `TypeError: fetch failed`;
  // but a URL it will not fetch at all (a blocked port, another scheme) is
  // the caller's configuration, and stays a TypeError.
  const cause = (error as { cause?: unknown }).cause;
  if (cause instanceof Error && REFUSED_TO_TRY.test(cause.message)) return false;
  return error instanceof TypeError && error.message === 'fetch failed';
}

/** What undici says of a URL it refuses to fetch at all. */
const REFUSED_TO_TRY = /^(bad port|URL scheme must be|invalid url)/i;

/** The first system error code in `error` and its causes (an `AggregateError`'s too: one per address tried). */
function codeOf(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 4) return undefined;
  const { code, cause, errors } = error as { code?: unknown; cause?: unknown; errors?: unknown };
  if (typeof code === 'string' && code !== '') return code;
  const fromCause = codeOf(cause, depth + 1);
  if (fromCause !== undefined) return fromCause;
  if (Array.isArray(errors)) {
    for (const each of errors) {
      const found = codeOf(each, depth + 1);
      if (found !== undefined) return found;
    }
  }
  return undefined;
}

function messageOf(error: unknown): string {
  const cause = (error as { cause?: unknown } | undefined)?.cause;
  const text = cause instanceof Error ? cause.message : error instanceof Error ? error.message : String(error);
  return text || 'no answer';
}
