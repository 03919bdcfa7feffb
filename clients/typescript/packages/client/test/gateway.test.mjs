// The client against a real `ballast serve` and a local upstream that fails
// on cue: what a service written for Node sees through the gateway.
//
//   BALLAST_BIN=target/debug/ballast npm test -w @ballast/client
//
// (`cargo test -p ballast-cli --test node` builds the binary and runs this.)

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import {
  BallastClient,
  BallastError,
  IdempotencyKey,
  SystemUnavailableError,
  attemptsOf,
  createBallastClient,
  keyFor,
  newKey,
} from '@ballast/client';

import {
  PATIENCE_MS,
  TOKEN,
  busy,
  eventually,
  refusingPort,
  rejection,
  reply,
  startBallast,
  startUpstream,
} from '../../../test-support/serve.mjs';

describe('through a real ballast serve', { timeout: 3 * PATIENCE_MS }, () => {
  let upstream;
  let served;
  /** @type {BallastClient} */
  let ballast;

  before(async () => {
    upstream = await startUpstream();
    const closed = await refusingPort();
    served = await startBallast(new URL('ballast.toml', import.meta.url), { upstream: upstream.port, closed });
    ballast = createBallastClient({ baseUrl: served.gateway, token: TOKEN, adminUrl: served.admin });
  });

  after(async () => {
    await served?.stop();
    await upstream?.stop();
  });

  test('a read is retried through a 503 and the answer comes back as is', async () => {
    upstream.on('/api/orders/7', (n) => (n === 1 ? busy() : reply(200, '{"id":7}', { 'x-up': '1' })));

    const response = await ballast.read('pay', 'orders/7?expand=items', { headers: { 'x-request-id': 'r-1' } });

    assert.equal(response.status, 200);
    assert.equal(attemptsOf(response), 2);
    assert.equal(response.headers.get('x-up'), '1');
    assert.deepEqual(await response.json(), { id: 7 });
    const seen = upstream.seen('/api/orders/7');
    assert.equal(seen.length, 2);
    for (const s of seen) {
      assert.equal(s.url, '/api/orders/7?expand=items');
      assert.equal(s.headers['x-request-id'], 'r-1');
      assert.equal(s.headers.authorization, undefined, "the gateway's token stays at the gateway");
    }
  });

  test('an unkeyed POST reaches the upstream once when its answer is lost', async () => {
    upstream.on('/api/notes', () => 'drop');

    const error = await rejection(ballast.writeOnce('pay', 'notes', { json: { text: 'hello' } }));

    assert.ok(error instanceof BallastError, String(error));
    assert.equal(error.reason, 'transport');
    assert.equal(error.status, 502);
    assert.equal(error.attempts, 1);
    assert.equal(error.rule, 'R-RES-RE-X1');
    assert.equal(error.sent, true, 'it may have been applied');
    assert.equal(error.system, 'pay');
    const seen = upstream.seen('/api/notes');
    assert.equal(seen.length, 1, 'sent exactly once');
    assert.equal(seen[0].body, '{"text":"hello"}');
    assert.equal(seen[0].headers['content-type'], 'application/json');
    assert.equal(seen[0].headers['idempotency-key'], undefined);
  });

  test('a keyed POST is retried with the same key through a 503 and a lost answer', async () => {
    const key = keyFor('order-1', 'pay');
    upstream.on('/api/payments/keyed', (n) => [busy(), 'drop'][n - 1] ?? reply(201, '{"paid":true}'));

    const response = await ballast.write('pay', 'payments/keyed', { key, json: { amount: 100 } });

    assert.equal(response.status, 201);
    assert.equal(attemptsOf(response), 3);
    const seen = upstream.seen('/api/payments/keyed');
    assert.deepEqual(
      seen.map((s) => [s.method, s.headers['idempotency-key'], s.body]),
      Array(3).fill(['POST', key, '{"amount":100}']),
    );
  });

  test('a deferred keyed write gets 202, and its task completes once the upstream recovers', async () => {
    const key = newKey(); // once per user action, stored with the order
    let down = true;
    upstream.on('/api/payments/deferred', () => (down ? busy() : reply(201, '{"paid":true}')));

    const handover = await ballast.writeOrDefer('pay', 'payments/deferred', { key, json: { amount: 250 } });

    assert.equal(handover.deferred, true, 'deferred after the in-memory attempts');
    assert.equal(handover.attempts, 3);
    assert.match(handover.taskId, /^\d+\.\S+$/, 'an unguessable handle');
    assert.equal(handover.location, `/tasks/${handover.taskId}`);
    const pending = await ballast.task(handover.taskId);
    assert.equal(pending.system, 'pay');
    assert.ok(['pending', 'running'].includes(pending.state), JSON.stringify(pending));

    down = false;
    const done = await eventually('the deferred write is delivered', async () => {
      const task = await ballast.task(handover.taskId);
      return task.state === 'completed' && task;
    });
    assert.equal(done.task_id, handover.taskId);
    assert.equal(done.result.status, 201);
    const seen = upstream.seen('/api/payments/deferred');
    assert.ok(seen.length >= 4, `3 attempts in memory, then the queue's: ${seen.length}`);
    assert.ok(
      seen.every((s) => s.headers['idempotency-key'] === key),
      'the same key on every attempt',
    );
    assert.equal(seen.filter((s) => s.status === 201).length, 1, 'applied once');
  });

  test('a deferrable write the upstream answers is not deferred', async () => {
    upstream.on('/api/payments/quick', () => reply(201, '{"paid":true}'));

    const handover = await ballast.writeOrDefer('pay', 'payments/quick', { key: newKey(), json: {} });

    assert.equal(handover.deferred, false);
    assert.equal(handover.response.status, 201);
    assert.equal(
      upstream.seen('/api/payments/quick')[0].headers.prefer,
      undefined,
      'the preference is for the gateway',
    );
  });

  test("the gateway's own answers throw; the upstream's answers, problems included, do not", async () => {
    const unknown = await rejection(ballast.read('nope', 'orders/1'));
    assert.ok(unknown instanceof BallastError, String(unknown));
    assert.equal(unknown.reason, 'unknown_system');
    assert.equal(unknown.status, 404);
    assert.equal(unknown.attempts, 0);
    assert.match(unknown.problem.detail, /pay/, 'names the systems there are');

    // The gateway judges keys too: a JavaScript caller can send any string.
    const badKey = await rejection(ballast.write('pay', 'payments/bad', { key: 'two words' }));
    assert.equal(badKey.reason, 'bad_key');
    assert.equal(badKey.rule, 'R-RES-RE-1');

    const noTask = await rejection(ballast.task('987654'));
    assert.equal(noTask.reason, 'not_found');
    assert.equal(noTask.taskId, '987654');

    upstream.on('/api/payments/declined', () =>
      reply(422, '{"title":"card declined"}', { 'content-type': 'application/problem+json' }),
    );
    const declined = await ballast.write('pay', 'payments/declined', { key: newKey(), body: '{}' });
    assert.equal(declined.status, 422);
    assert.equal(attemptsOf(declined), 1, 'a 4xx is not retried');
    assert.deepEqual(await declined.json(), { title: 'card declined' });
    assert.equal(upstream.seen('/api/payments/bad').length, 0, 'a bad key sends nothing');
  });

  test('a keyed_write route refuses a write without a key, in the caller\'s words, citing R-RES-RE-1', async () => {
    upstream.on('/routed/payments', () => reply(201, '{}'));

    const error = await rejection(ballast.writeOnce('routed', 'payments', { json: { amount: 100 } }));

    assert.ok(error instanceof BallastError, String(error));
    assert.equal(error.reason, 'key_required');
    assert.equal(error.status, 400);
    assert.equal(error.rule, 'R-RES-RE-1', 'the rule that allows a retry only with a key');
    assert.equal(error.attempts, 0);
    // The detail is for whoever reads the log: it names the header a caller sends, not an API of another language.
    assert.match(error.problem.detail, /Idempotency-Key/);
    assert.doesNotMatch(error.problem.detail, /write\(&key|write_once\(/);
    assert.doesNotMatch(error.problem.detail, /R-RES-RE-X2/, 'a missing key is R-RES-RE-1, not a contract error');
    assert.equal(upstream.seen('/routed/payments').length, 0, 'refused unsent');
  });

  test('without the token the gateway answers 401 and sends nothing', async () => {
    upstream.on('/api/orders/8', () => reply(200, '{}'));
    const anonymous = new BallastClient({ baseUrl: served.gateway });

    const error = await rejection(anonymous.read('pay', 'orders/8'));

    assert.ok(error instanceof BallastError, String(error));
    assert.equal(error.reason, 'unauthorized');
    assert.equal(error.status, 401);
    assert.equal(upstream.seen('/api/orders/8').length, 0);
  });

  test('an open breaker fails fast as SystemUnavailableError, with Retry-After', async () => {
    upstream.on('/fragile/rates', () => busy());

    const first = await ballast.read('fragile', 'rates');
    assert.equal(first.status, 503, "the upstream's own 503 comes back as an answer");
    const error = await rejection(ballast.read('fragile', 'rates'));

    assert.ok(error instanceof SystemUnavailableError, String(error));
    assert.ok(error instanceof BallastError);
    assert.equal(error.name, 'SystemUnavailableError');
    assert.equal(error.reason, 'breaker_open');
    assert.equal(error.status, 503);
    assert.equal(error.system, 'fragile');
    assert.ok(error.retryAfter > 0 && error.retryAfter <= 30, `Retry-After ${error.retryAfter}`);
    assert.equal(upstream.seen('/fragile/rates').length, 1, 'nothing sent while open');
  });

  test('a refused connection is a transport failure that sent nothing', async () => {
    const error = await rejection(ballast.writeOnce('gone', 'messages', { json: { to: '+7' } }));

    assert.equal(error.reason, 'transport');
    assert.equal(error.sent, false, 'the connection never opened: nothing can have been applied');
  });

  test('readiness comes from the admin listener', async () => {
    const readiness = await eventually('ballast serve is ready', async () => {
      const report = await ballast.readiness();
      return report.ready && report;
    });

    assert.equal(readiness.queue.reachable, true);
    assert.deepEqual(readiness.systems.map((s) => s.system).sort(), ['fragile', 'gone', 'pay', 'routed']);
    assert.equal(readiness.systems.find((s) => s.system === 'pay').critical, true);
  });

  test('a key read back from storage is checked before it is sent', () => {
    assert.equal(IdempotencyKey.from(keyFor('order-1', 'pay')), keyFor('order-1', 'pay'));
    assert.throws(() => IdempotencyKey.from('two words'), /visible ASCII/);
  });
});
