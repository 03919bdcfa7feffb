// The gateway down: no answer at all is a GatewayUnreachableError — not
// fetch's `TypeError: fetch failed`, the class of a programming error too —
// saying whether the request may have arrived, and for a write whether its
// outcome is unknown. The caller's own abort and a request fetch refuses to
// make stay what they are.

import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { after, before, describe, test } from 'node:test';

import {
  BallastError,
  GatewayUnreachableError,
  createBallastClient,
  isBallastError,
  isGatewayUnreachable,
  keyFor,
} from '@ballast/client';

import { refusingPort } from '../../../test-support/serve.mjs';

describe('the gateway unreachable', () => {
  /** A "gateway" that reads each request and closes the connection without an answer. */
  let dropping;
  let refused;

  before(async () => {
    dropping = createServer((socket) => socket.once('data', () => socket.destroy()));
    await new Promise((resolve) => dropping.listen(0, '127.0.0.1', resolve));
    refused = await refusingPort();
  });
  after(() => new Promise((resolve) => dropping.close(resolve)));

  test('a refused connection: nothing sent, a write may be made again as it was', async () => {
    const ballast = createBallastClient({ baseUrl: `http://127.0.0.1:${refused}` });

    const error = await ballast.write('sber', 'payments?card=4111', { key: keyFor('order-1', 'pay'), json: {} }).then(
      () => assert.fail('expected a rejection'),
      (e) => e,
    );

    assert.ok(error instanceof GatewayUnreachableError, String(error));
    assert.ok(isGatewayUnreachable(error));
    assert.ok(!(error instanceof TypeError), 'not the class of a programming error');
    assert.ok(!isBallastError(error), 'not an answer of the gateway');
    assert.equal(error.name, 'GatewayUnreachableError');
    assert.equal(error.sent, false);
    assert.equal(error.outcomeUnknown, false);
    assert.equal(error.code, 'ECONNREFUSED');
    assert.equal(error.system, 'sber');
    assert.equal(error.method, 'POST');
    assert.equal(error.url, `http://127.0.0.1:${refused}/call/sber/payments`, 'without its query');
    assert.match(error.message, /nothing was sent/);
    assert.equal(error.cause.message, 'fetch failed', "fetch's own error is its cause");
  });

  test('a connection cut after the request went out: a keyed write has an unknown outcome', async () => {
    const ballast = createBallastClient({ baseUrl: `http://127.0.0.1:${dropping.address().port}` });

    const write = await ballast.write('sber', 'payments', { key: keyFor('order-2', 'pay'), json: {} }).catch((e) => e);
    const once = await ballast.writeOnce('sms', 'messages', { json: {} }).catch((e) => e);
    const read = await ballast.read('sber', 'orders/2').catch((e) => e);

    for (const error of [write, once, read]) {
      assert.ok(error instanceof GatewayUnreachableError, String(error));
      assert.equal(error.sent, true, `${error.method}: it may have arrived`);
    }
    assert.equal(write.outcomeUnknown, true);
    assert.match(write.message, /repeat it only with the same key/);
    assert.equal(once.outcomeUnknown, true);
    assert.match(once.message, /not sent again \(R-RES-RE-X1\)/);
    assert.equal(read.outcomeUnknown, false, 'a read changes nothing');
  });

  test("a task's handle stays out of the error", async () => {
    const ballast = createBallastClient({ baseUrl: `http://127.0.0.1:${refused}` });

    const error = await ballast.task('17.secret-part').catch((e) => e);

    assert.ok(error instanceof GatewayUnreachableError, String(error));
    assert.equal(error.taskId, '17.secret-part');
    assert.doesNotMatch(error.message, /secret-part/);
    assert.doesNotMatch(error.url, /secret-part/);
  });

  test('the admin listener unreachable: the health calls say so the same way', async () => {
    const ballast = createBallastClient({ adminUrl: `http://127.0.0.1:${refused}` });

    const error = await ballast.readiness().catch((e) => e);

    assert.ok(error instanceof GatewayUnreachableError, String(error));
    assert.equal(error.sent, false);
  });

  test("the caller's abort and a request fetch refuses to make are not the gateway's absence", async () => {
    const ballast = createBallastClient({ baseUrl: `http://127.0.0.1:${dropping.address().port}` });

    const aborted = await ballast.read('sber', 'x', { signal: AbortSignal.abort() }).catch((e) => e);
    assert.equal(aborted.name, 'AbortError');
    assert.ok(!isGatewayUnreachable(aborted));

    const badHeader = await ballast.read('sber', 'x', { headers: { 'x-bad': 'a\nb' } }).catch((e) => e);
    assert.ok(badHeader instanceof TypeError, String(badHeader));
    assert.ok(!isGatewayUnreachable(badHeader), 'a bug in the call stays a TypeError');
  });

  test('a fetch of your own that fails with a network code is read the same way', async () => {
    const reset = Object.assign(new Error('socket hang up'), { code: 'ECONNRESET' });
    const ballast = createBallastClient({
      fetch: async () => {
        throw reset;
      },
    });

    const error = await ballast.writeOrDefer('sber', 'p', { key: keyFor(1, 'p') }).catch((e) => e);

    assert.ok(error instanceof GatewayUnreachableError);
    assert.equal(error.code, 'ECONNRESET');
    assert.equal(error.outcomeUnknown, true);
    assert.equal(error.cause, reset);
    assert.ok(!(error instanceof BallastError));
  });
});

test('a URL fetch will not try at all is the configuration, not an outage', async () => {
  const ballast = createBallastClient({ baseUrl: 'http://127.0.0.1:1' }); // a port fetch blocks

  const error = await ballast.read('sber', 'x').catch((e) => e);

  assert.ok(error instanceof TypeError, String(error));
  assert.ok(!isGatewayUnreachable(error));
});
