import { HttpException, HttpStatus } from '@nestjs/common';
import {
  isBallastError,
  isGatewayUnreachable,
  type BallastError,
  type GatewayUnreachableError,
  type Reason,
} from '@ballast/client';

/** How the gateway's answers reach the app's own caller: a status, and what kind of failure it is. */
interface Mapping {
  status: HttpStatus;
  /**
   * The app's own mistake — a misspelt system, a key missing or reused, a
   * gateway configured wrong — which no caller of the app can fix by asking
   * again: 500, logged as an error, the message naming it.
   */
  programmingError: boolean;
  /** What happened, for the message: ``(e) => `…` ``. */
  says: (error: BallastError) => string;
}

const system = (e: BallastError) => e.system ?? 'the system';
const wait = (e: BallastError) => (e.retryAfter === undefined ? 'ask again later' : `ask again in ${e.retryAfter} s`);
const tried = (attempts: number) => (attempts === 1 ? 'tried once' : `tried ${attempts} times`);
const unavailable = (e: BallastError) => `${system(e)} is unavailable now: ${wait(e)}`;
const bug = (says: (e: BallastError) => string): Mapping => ({
  status: HttpStatus.INTERNAL_SERVER_ERROR,
  programmingError: true,
  says,
});

/**
 * Every reason of the gateway, mapped: the "system unavailable" ones to 503
 * with their `Retry-After`, the timeout to 504, a transport failure and a
 * deferral that broke midway to 502, a conflict to 409, an unknown task to
 * 404, and the app's own mistakes to 500.
 */
const MAPPINGS: Readonly<Record<Reason, Mapping>> = {
  breaker_open: { status: HttpStatus.SERVICE_UNAVAILABLE, programmingError: false, says: unavailable },
  bulkhead_full: { status: HttpStatus.SERVICE_UNAVAILABLE, programmingError: false, says: unavailable },
  budget_exhausted: { status: HttpStatus.SERVICE_UNAVAILABLE, programmingError: false, says: unavailable },
  rate_limited: { status: HttpStatus.SERVICE_UNAVAILABLE, programmingError: false, says: unavailable },
  queue_unavailable: {
    status: HttpStatus.SERVICE_UNAVAILABLE,
    programmingError: false,
    says: (e) => `the write to ${system(e)} could not be handed to the gateway's durable queue: ${wait(e)}`,
  },
  too_many_waiters: {
    status: HttpStatus.SERVICE_UNAVAILABLE,
    programmingError: false,
    says: (e) => `the gateway holds as many waiting requests as it may: ${wait(e)}`,
  },
  token_throttled: {
    status: HttpStatus.SERVICE_UNAVAILABLE,
    programmingError: false,
    says: (e) => `the gateway refuses tokens for now after too many wrong ones: ${wait(e)}`,
  },
  timeout: {
    status: HttpStatus.GATEWAY_TIMEOUT,
    programmingError: false,
    says: (e) => `${system(e)} did not answer in time (${tried(e.attempts)})`,
  },
  transport: {
    status: HttpStatus.BAD_GATEWAY,
    programmingError: false,
    says: (e) =>
      `${system(e)} gave no complete answer (${tried(e.attempts)}): ` +
      (e.sent === false ? 'nothing was sent' : 'the request may have arrived'),
  },
  answer_too_large: {
    status: HttpStatus.BAD_GATEWAY,
    programmingError: false,
    says: (e) => `${system(e)}'s answer was larger than the gateway reads whole: the request was sent`,
  },
  tls_expired: {
    status: HttpStatus.BAD_GATEWAY,
    programmingError: false,
    says: (e) => `${system(e)}'s TLS certificate has expired or is not valid yet: nothing was sent`,
  },
  proxy_refused: {
    status: HttpStatus.BAD_GATEWAY,
    programmingError: false,
    says: (e) => `the egress proxy did not lead to ${system(e)}: nothing was sent; safe to send again`,
  },
  draining: {
    status: HttpStatus.SERVICE_UNAVAILABLE,
    programmingError: false,
    says: (e) =>
      e.sent
        ? `the gateway restarted while the write to ${system(e)} was in flight: its outcome is unknown`
        : `the gateway is restarting: ${wait(e)}`,
  },
  token_unavailable: {
    status: HttpStatus.SERVICE_UNAVAILABLE,
    programmingError: false,
    says: (e) => `no access token for ${system(e)} (its token endpoint is down): nothing was sent; ${wait(e)}`,
  },
  internal: {
    status: HttpStatus.BAD_GATEWAY,
    programmingError: false,
    says: (e) => `the gateway failed while deferring the write to ${system(e)}: whether it arrived is unknown`,
  },
  sequence_pending: {
    status: HttpStatus.CONFLICT,
    programmingError: false,
    says: (e) => `an earlier write of the same sequence to ${system(e)} waits in the gateway's queue: this one was not sent`,
  },
  not_found: { status: HttpStatus.NOT_FOUND, programmingError: false, says: () => 'no deferred write has this handle' },
  unknown_system: bug(
    (e) => `no system ${JSON.stringify(e.system)} in ballast.toml: a misspelt name (\`ballast codegen ts\` makes it a compile error)`,
  ),
  bad_key: bug(() => 'the gateway refused the idempotency key: 1 to 255 visible ASCII characters'),
  key_required: bug(
    (e) => `a write to a keyed_write route of ${system(e)} without an Idempotency-Key: make it with write(…, { key })`,
  ),
  key_reused: {
    status: HttpStatus.UNPROCESSABLE_ENTITY,
    programmingError: false,
    says: (e) =>
      `the idempotency key already names another request to ${system(e)} (another method, path, body or content type): ` +
      'this one was not sent (R-RES-RE-1); derive the key from the payment attempt, not the order, when the amount can change',
  },
  unrouted: bug((e) => `a write no route of ${system(e)} declares: declare it in ballast.toml's routes`),
  method_not_allowed: bug(() => 'TRACE and CONNECT are never forwarded'),
  bad_path: bug(() => 'a path the gateway refuses'),
  bad_request: bug(() => 'a request the gateway refuses'),
  bad_callback: bug(() => "a callback URL whose host is not in the gateway's [gateway] callback_hosts"),
  seal_key_missing: bug(() => "a task's answer is sealed with a key the gateway no longer has"),
  loop_detected: bug((e) => `the base_url of ${system(e)} points back at the gateway`),
  body_timeout: bug(() => 'the request body reached the gateway too slowly'),
  too_large: bug(() => 'a request body larger than the gateway takes'),
  cross_site: bug(() => 'the gateway refused a cross-site request'),
  unauthorized: bug(() => "the gateway refused this app's token"),
  unknown_host: bug(() => 'the gateway refused the Host the app sent'),
  tls_untrusted: bug((e) => `the gateway does not trust ${system(e)}'s certificate: its CA belongs in [systems.NAME.tls] ca_file`),
  tls_name_mismatch: bug((e) => `${system(e)}'s certificate is for another name: set [systems.NAME.tls] server_name`),
  tls_client_cert_refused: bug(
    (e) => `${system(e)} refused the gateway's client certificate, or wants one: [systems.NAME.tls] cert_file and key_file`,
  ),
  tls_protocol: bug((e) => `the gateway and ${system(e)} share no TLS version or cipher`),
  proxy_auth_required: bug(() => 'the egress proxy wants credentials: [systems.NAME] proxy_auth_env'),
  token_refused: bug((e) => `the token endpoint refused the gateway's client credentials for ${system(e)}`),
};

/**
 * The HTTP answer a ballast error becomes: Nest's `HttpException` with the
 * status its reason maps to, the headers it needs (`Retry-After`), and
 * whether it is the app's own mistake. {@link BallastExceptionFilter}
 * sends it; thrown on its own, Nest's default filter sends it without the
 * headers.
 */
export class BallastHttpException extends HttpException {
  /** Headers to send with it: `Retry-After` for the "ask again later" reasons, when the gateway said. */
  readonly headers: Readonly<Record<string, string>>;
  /** The gateway's reason, or `gateway_unreachable` when it did not answer. */
  readonly reason: Reason | 'gateway_unreachable';
  /** The app's own mistake (500, and a bug to fix), not a failure of the system or the gateway. */
  readonly programmingError: boolean;

  constructor(
    body: BallastHttpBody,
    headers: Record<string, string>,
    programmingError: boolean,
    cause: BallastError | GatewayUnreachableError,
  ) {
    super(body, body.statusCode, { cause });
    this.headers = headers;
    this.reason = body.reason;
    this.programmingError = programmingError;
  }
}

/** The body of a {@link BallastHttpException}: Nest's `{ statusCode, message, error }`, and what the gateway said. */
export interface BallastHttpBody {
  statusCode: number;
  message: string;
  /** The status's name: `Service Unavailable`. */
  error: string;
  /** The gateway's reason, or `gateway_unreachable`. */
  reason: Reason | 'gateway_unreachable';
  /** The system called. */
  system?: string;
  /** Seconds until asking again may help (also sent as `Retry-After`). */
  retryAfter?: number;
  /** For `transport` and an unreachable gateway: whether the request may have arrived. */
  sent?: boolean;
  /** For an unreachable gateway: a write that may have been applied. */
  outcomeUnknown?: boolean;
  /** The rule that decided, e.g. `R-RES-RE-1`. */
  rule?: string;
}

/**
 * The HTTP status each reason of the gateway becomes, for a test or a
 * filter of your own: the table {@link toHttpException} follows.
 */
export const BALLAST_HTTP_STATUS: Readonly<Record<Reason | 'gateway_unreachable', number>> = {
  ...(Object.fromEntries(Object.entries(MAPPINGS).map(([reason, { status }]) => [reason, status])) as Record<
    Reason,
    number
  >),
  gateway_unreachable: HttpStatus.SERVICE_UNAVAILABLE,
};

/**
 * The `HttpException` a ballast error becomes, or `undefined` for any other
 * value — for a controller that maps errors itself:
 *
 * | from | status | headers, body |
 * |---|---|---|
 * | `breaker_open`, `bulkhead_full`, `budget_exhausted`, `rate_limited` ({@link SystemUnavailableError}) | 503 | `Retry-After` |
 * | `queue_unavailable`, `too_many_waiters`, `token_throttled`, `token_unavailable`, `draining` | 503 | `Retry-After` when the gateway sent one |
 * | `timeout` | 504 | |
 * | `transport` | 502 | `sent`: whether the request may have arrived |
 * | `proxy_refused`, `tls_expired` | 502 | nothing was sent |
 * | `answer_too_large` | 502 | `sent`: the request was sent |
 * | `internal` (a deferral broken midway) | 502 | |
 * | `sequence_pending` | 409 | |
 * | `key_reused` | 422 | the key names another request: derive keys from the attempt, not the order |
 * | `not_found` (a task handle) | 404 | |
 * | {@link GatewayUnreachableError} | 503 | `sent`, `outcomeUnknown` |
 * | `unknown_system`, `bad_key`, `key_required`, `unrouted`, `bad_path`, `bad_request`, `bad_callback`, `method_not_allowed`, `seal_key_missing`, `loop_detected`, `body_timeout`, `too_large`, `cross_site`, `unauthorized`, `unknown_host`, `tls_untrusted`, `tls_name_mismatch`, `tls_client_cert_refused`, `tls_protocol`, `proxy_auth_required`, `token_refused` | 500 | the message names the programming error (the gateway's configuration, for TLS, proxy and token) |
 *
 * The body is Nest's `{ statusCode, message, error }` with the `reason`, the
 * `system` and, where they apply, `retryAfter`, `sent`, `outcomeUnknown` and
 * the `rule`. A 401 or 403 of the gateway is the app's token or address
 * being wrong, never the app's caller's: it becomes 500 too.
 *
 * Recognises the errors of any copy of `@ballast/client` (by brand).
 *
 * @example
 * try {
 *   return await this.sber.read(`orders/${id}`);
 * } catch (e) {
 *   throw toHttpException(e) ?? e;
 * }
 */
export function toHttpException(error: unknown): BallastHttpException | undefined {
  if (isGatewayUnreachable(error)) {
    const body: BallastHttpBody = {
      statusCode: HttpStatus.SERVICE_UNAVAILABLE,
      message:
        `the ballast gateway did not answer: ` +
        (!error.sent ? 'nothing was sent' : error.outcomeUnknown ? 'the outcome of the write is unknown' : 'no answer'),
      error: 'Service Unavailable',
      reason: 'gateway_unreachable',
      sent: error.sent,
      outcomeUnknown: error.outcomeUnknown,
      ...(error.system !== undefined && { system: error.system }),
    };
    return new BallastHttpException(body, {}, false, error);
  }
  if (!isBallastError(error)) return undefined;
  const mapping: Mapping = MAPPINGS[error.reason] ?? bug(() => `a reason this version does not know: ${error.reason}`);
  const body: BallastHttpBody = {
    statusCode: mapping.status,
    message: `${mapping.says(error)} (${error.reason}${error.rule ? `, ${error.rule}` : ''})`,
    error: STATUS_TEXT[mapping.status] ?? 'Error',
    reason: error.reason,
    ...(error.system !== undefined && { system: error.system }),
    ...(mapping.status === HttpStatus.SERVICE_UNAVAILABLE && error.retryAfter !== undefined && { retryAfter: error.retryAfter }),
    ...(error.sent !== undefined && { sent: error.sent }),
    ...(error.rule !== undefined && { rule: error.rule }),
  };
  const headers: Record<string, string> = {};
  if (body.retryAfter !== undefined && Number.isFinite(body.retryAfter)) {
    headers['Retry-After'] = String(Math.max(0, Math.ceil(body.retryAfter)));
  }
  return new BallastHttpException(body, headers, mapping.programmingError, error);
}

const STATUS_TEXT: Partial<Record<number, string>> = {
  [HttpStatus.NOT_FOUND]: 'Not Found',
  [HttpStatus.CONFLICT]: 'Conflict',
  [HttpStatus.INTERNAL_SERVER_ERROR]: 'Internal Server Error',
  [HttpStatus.BAD_GATEWAY]: 'Bad Gateway',
  [HttpStatus.SERVICE_UNAVAILABLE]: 'Service Unavailable',
  [HttpStatus.GATEWAY_TIMEOUT]: 'Gateway Timeout',
};
