/**
 * `@ballast/client`: a typed client of `ballast serve`'s outbound gateway.
 *
 * Reads are retried, keyed writes are retried with their key or handed to
 * the durable queue, writes without a key are sent exactly once — by the
 * gateway, under each system's policy in `ballast.toml`. This client adds no
 * retry of its own (R-RES-RE-X4), and its types refuse a write without a key
 * where a retried one is asked for (R-RES-RE-1).
 *
 * @packageDocumentation
 */

export {
  ATTEMPTS_HEADER,
  BallastClient,
  DEFAULT_ADMIN_URL,
  DEFAULT_GATEWAY_URL,
  attemptsOf,
  createBallastClient,
  type BodyInit,
  type ClientOptions,
  type Handover,
  type HeadersInit,
  type ReadInit,
  type ReadMethod,
  type Readiness,
  type SystemHealth,
  type Task,
  type TaskState,
  type WriteInit,
  type WriteMethod,
  type WriteOnceInit,
} from './client.js';
export {
  BallastError,
  SystemUnavailableError,
  type ErrorContext,
  type Problem,
  type Reason,
  type UnavailableReason,
} from './error.js';
export { IdempotencyKey, KEY_NAMESPACE, MAX_KEY_LENGTH, keyFor, newKey } from './key.js';
