// The CommonJS build, as a Nest project compiled to CommonJS requires it.

const assert = require('node:assert/strict');
const { test } = require('node:test');

require('reflect-metadata');
const nest = require('@ballast/nestjs');
const client = require('@ballast/client');

test('require() gets the CommonJS build: the module and the client of the CommonJS client', () => {
  assert.match(require.resolve('@ballast/nestjs'), /dist[\\/]cjs[\\/]index\.js$/);
  const dynamic = nest.BallastModule.forRoot({ baseUrl: 'http://127.0.0.1:9465', isGlobal: true });
  assert.equal(dynamic.module, nest.BallastModule);
  assert.equal(dynamic.global, true);
  assert.ok(dynamic.exports.includes(client.BallastClient), "the token is the CommonJS client's class");
  assert.equal(nest.SystemUnavailableError, client.SystemUnavailableError);

  const withCallbacks = nest.BallastModule.forRoot({ callbacks: { secret: 's3cret' } });
  assert.ok(withCallbacks.exports.includes(nest.BallastTaskEvents));
  assert.equal(withCallbacks.controllers.length, 1);
  assert.equal(typeof nest.OnBallastTask('completed'), 'function');
  assert.equal(nest.verifyCallback, client.verifyCallback, "the CommonJS client's, re-exported");
});
