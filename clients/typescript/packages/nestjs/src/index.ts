/**
 * `@ballast/nestjs`: `ballast serve`'s gateway in a NestJS application — a
 * module providing an injectable {@link BallastClient}, the guide's "system
 * unavailable" as {@link SystemUnavailableError}, and a health indicator for
 * `@nestjs/terminus`.
 *
 * Everything `@ballast/client` exports is exported here too, so an adapter
 * needs one import.
 *
 * @packageDocumentation
 */

export * from '@ballast/client';
export { BallastHealthIndicator, type BallastHealthResult } from './health.js';
export { BALLAST_OPTIONS, BallastModule, type BallastModuleAsyncOptions, type BallastModuleOptions } from './module.js';
