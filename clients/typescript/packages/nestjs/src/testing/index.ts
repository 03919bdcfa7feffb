/**
 * `@ballast/nestjs/testing`: tests of a Nest application that calls the
 * gateway — {@link BallastTestingModule}, the module on a fake gateway
 * scripted by the test, and, from `@ballast/client/testing`, the fake itself
 * ({@link FakeBallastGateway}) and {@link startBallastServe}, a real `ballast
 * serve` for an end-to-end suite.
 *
 * @packageDocumentation
 */

export * from '@ballast/client/testing';
export { BallastTestingModule, type BallastTestingOptions } from './testing-module.js';
