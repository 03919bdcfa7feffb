/**
 * `@ballast/client/testing`: what a test of code that calls the gateway
 * needs — a {@link FakeBallastGateway} in the test's own process, scripted
 * answer by answer, and {@link startBallastServe}, a real `ballast serve`
 * for an end-to-end suite.
 *
 * @packageDocumentation
 */

export {
  FakeBallastGateway,
  FakeRoute,
  type FakeCall,
  type FakeCallback,
  type FakeDeferral,
  type FakeGatewayOptions,
  type FakeProblem,
  type FakeResult,
} from './fake-gateway.js';
export { startBallastServe, type BallastServe, type BallastServeOptions } from './serve.js';
