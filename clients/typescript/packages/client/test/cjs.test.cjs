// The CommonJS build, as `require('@ballast/client')` loads it: the same
// API — the implementation the ES module entry re-exports (identity.test.mjs).

const assert = require('node:assert/strict');
const { test } = require('node:test');

const client = require('@ballast/client');

test('require() gets the CommonJS build with the whole API', async () => {
  assert.match(require.resolve('@ballast/client'), /dist[\\/]cjs[\\/]index\.js$/);
  for (const name of [
    'BallastClient',
    'BallastError',
    'SystemUnavailableError',
    'createBallastClient',
    'keyFor',
    'newKey',
    'IdempotencyKey',
    'attemptsOf',
    'answerJson',
    'verifyCallback',
    'signCallback',
    'CallbackSignatureError',
    'TaskWaitTimeoutError',
    'GatewayUnreachableError',
    'SystemClient',
    'REASONS',
    'isBallastError',
    'isSystemUnavailable',
    'isGatewayUnreachable',
  ]) {
    assert.ok(client[name], name);
  }
  assert.equal(client.keyFor('order-1', 'pay'), 'e1febc6a-55bf-585b-bbbb-1a63d108c586');

  const problem = { ballast: { reason: 'bulkhead_full', attempts: 0 } };
  const ballast = client.createBallastClient({
    fetch: async () =>
      new Response(JSON.stringify(problem), {
        status: 503,
        headers: { 'content-type': 'application/problem+json', 'ballast-problem': 'bulkhead_full', 'retry-after': '1' },
      }),
  });
  const error = await ballast.read('pay', 'x').then(
    () => assert.fail('expected a rejection'),
    (e) => e,
  );
  assert.ok(error instanceof client.SystemUnavailableError);
  assert.equal(error.retryAfter, 1);

  // node:crypto from CommonJS: a callback signed and verified.
  const body = '{"type":"task.failed","task":{"task_id":"1.x","state":"failed"}}';
  const signature = client.signCallback('s3cret', body);
  assert.equal(client.verifyCallback({ secret: 's3cret', signature, body }).type, 'task.failed');
  assert.throws(
    () => client.verifyCallback({ secret: 'other', signature, body }),
    (e) => e instanceof client.CallbackSignatureError && e.kind === 'forged',
  );
});
