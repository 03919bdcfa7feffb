/**
 * `@ballast/nestjs`: `ballast serve`'s gateway in a NestJS application — a
 * module providing an injectable {@link BallastClient}, the guide's "system
 * unavailable" as {@link SystemUnavailableError}, the gateway's callbacks as
 * {@link OnBallastTask} handlers, and health indicators for
 * `@nestjs/terminus`.
 *
 * Everything `@ballast/client` exports is exported here too, so an adapter
 * needs one import.
 *
 * @packageDocumentation
 */

export * from '@ballast/client';
export {
  BALLAST_CALLBACK_OPTIONS,
  BallastTaskEvents,
  DEFAULT_CALLBACK_PATH,
  OnBallastTask,
  type BallastCallbackOptions,
  type BallastTaskEvent,
  type BallastTaskListener,
  type CallbackRequest,
  type CallbackSecret,
  type TaskOutcome,
} from './callbacks.js';
export { BallastHealthIndicator, type BallastHealthResult, type BallastSystemsResult } from './health.js';
export { BALLAST_OPTIONS, BallastModule, type BallastModuleAsyncOptions, type BallastModuleOptions } from './module.js';
