/**
 * `@ballast/client`: a typed client of `ballast serve`'s outbound gateway.
 *
 * Reads are retried, keyed writes are retried with their key or handed to
 * the durable queue, writes without a key are sent exactly once — by the
 * gateway, under each system's policy in `ballast.toml`. A deferred write is
 * waited for ({@link BallastClient.waitForTask}) or reported to a callback
 * URL, whose signature {@link verifyCallback} checks. This client adds no
 * retry of its own (R-RES-RE-X4), and its types refuse a write without a key
 * where a retried one is asked for, or with a key made on the spot
 * (R-RES-RE-1). System names come from `ballast.toml` through `ballast
 * codegen ts` ({@link BallastSystems}).
 *
 * `import` and `require` of this package load one implementation: its
 * classes are the same objects either way, and its errors are recognised
 * across copies of the package ({@link isBallastError}).
 *
 * @packageDocumentation
 */

export {
  ATTEMPTS_HEADER,
  BallastClient,
  DEFAULT_ADMIN_URL,
  DEFAULT_GATEWAY_URL,
  MAX_TASK_WAIT_MS,
  answerJson,
  attemptsOf,
  createBallastClient,
  type Answer,
  type BodyInit,
  type ClientOptions,
  type DeferReason,
  type Handover,
  type HeadersInit,
  type ReadInit,
  type ReadMethod,
  type Readiness,
  type SystemHealth,
  type SystemStatus,
  type SystemsReport,
  type Task,
  type TaskState,
  type WaitForTaskOptions,
  type WriteInit,
  type WriteMethod,
  type WriteOnceInit,
  type WriteOrDeferInit,
} from './client.js';
export {
  CALLBACK_HEADER,
  CallbackSignatureError,
  DEFAULT_CALLBACK_TOLERANCE_SEC,
  DELIVERY_HEADER,
  SIGNATURE_HEADER,
  TASK_HEADER,
  signCallback,
  verifyCallback,
  type CallbackEvent,
  type CallbackType,
  type VerifyCallbackInit,
} from './callback.js';
export {
  BallastError,
  REASONS,
  SystemUnavailableError,
  TaskWaitTimeoutError,
  isBallastError,
  isSystemUnavailable,
  type ErrorContext,
  type Problem,
  type Reason,
  type UnavailableReason,
} from './error.js';
export { IdempotencyKey, KEY_NAMESPACE, MAX_KEY_LENGTH, keyFor, newKey, type FreshKey } from './key.js';
export { SystemClient } from './system-client.js';
export type { BallastSystems, SystemName } from './systems.js';
export { GatewayUnreachableError, isGatewayUnreachable } from './unreachable.js';
