// A deferred write followed to its end through a real `ballast serve`: the
// 202 saying why and when, the signed callback the gateway POSTs when the
// write ends (repeated until a 2xx), waitForTask's held requests, and the
// systems' health apart from the gateway's readiness.
//
//   BALLAST_BIN=target/debug/ballast npm test -w @ballast/client
//
// Needs a ballast with the deferral contract of clients/typescript/README.md
// (`deferred_because`, `?wait=`, `Ballast-Callback`, `/health/systems`).

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';

import {
  BallastError,
  CallbackSignatureError,
  TaskWaitTimeoutError,
  answerJson,
  createBallastClient,
  newKey,
  verifyCallback,
} from '@ballast/client';

import {
  PATIENCE_MS,
  TOKEN,
  busy,
  eventually,
  rejection,
  reply,
  startBallast,
  startUpstream,
} from '../../../test-support/serve.mjs';

/** What `[gateway] callback_secret_env` names, as the gateway's environment has it. */
const SECRET = 'callback-secret-0123456789abcdef';

describe('a deferred write, followed through a real ballast serve', { timeout: 4 * PATIENCE_MS }, () => {
  let upstream;
  let receiver;
  let served;
  let ballast;
  /** Every answer the client got, for the headers the client does not surface. */
  const answers = [];

  before(async () => {
    upstream = await startUpstream();
    receiver = await startReceiver();
    process.env.BALLAST_TEST_CALLBACK_SECRET = SECRET;
    served = await startBallast(new URL('deferred.toml', import.meta.url), {
      upstream: upstream.port,
      receiver: new URL(receiver.url).port,
    });
    ballast = createBallastClient({
      baseUrl: served.gateway,
      token: TOKEN,
      adminUrl: served.admin,
      fetch: async (url, init) => {
        const response = await fetch(url, init);
        answers.push({ url: String(url), response });
        return response;
      },
    });
  });

  after(async () => {
    await served?.stop();
    await receiver?.stop();
    await upstream?.stop();
  });

  test('the 202 says why and when; the end is POSTed, signed, until the receiver takes it', async () => {
    let down = true;
    upstream.on('/api/payments/called-back', () =>
      down ? busy() : reply(201, '{"paymentId":"p-1"}', { 'content-type': 'application/json' }),
    );
    receiver.answer((n) => (n === 1 ? 500 : 204)); // the first delivery fails: the gateway repeats it

    const handover = await ballast.writeOrDefer('pay', 'payments/called-back', {
      key: newKey(),
      json: { amount: 100 },
      callback: `${receiver.url}/hooks/ballast?shop=7`,
    });

    assert.equal(handover.deferred, true);
    assert.equal(handover.deferredBecause, 'attempts_exhausted');
    assert.equal(handover.attempts, 2);
    assert.ok(handover.nextAttemptAt instanceof Date, String(handover.nextAttemptAt));
    assert.ok(Math.abs(handover.nextAttemptAt.getTime() - Date.now()) < 60_000, String(handover.nextAttemptAt));
    const accepted = answers.at(-1).response;
    assert.equal(accepted.headers.get('location'), `/tasks/${handover.taskId}`);
    assert.match(accepted.headers.get('retry-after') ?? '', /^\d+$/, 'Retry-After with the next attempt known');

    down = false;
    const [first, second] = await eventually('the callback is repeated after a 500', () => {
      const seen = receiver.seen();
      return seen.length >= 2 && seen;
    });
    for (const delivery of [first, second]) {
      assert.equal(delivery.method, 'POST');
      assert.equal(delivery.url, '/hooks/ballast?shop=7');
      assert.match(delivery.headers['content-type'], /^application\/json/);
      assert.equal(delivery.headers['ballast-task'], handover.taskId);
      assert.equal(delivery.headers['idempotency-key'], delivery.headers['ballast-delivery']);
      assert.equal(delivery.headers.authorization, undefined, "the gateway's token is not sent out");
    }
    assert.ok(first.headers['ballast-delivery'], 'a delivery id');
    assert.equal(second.headers['ballast-delivery'], first.headers['ballast-delivery'], 'the same on its retry');

    const event = verifyCallback({ secret: SECRET, signature: second.headers['ballast-signature'], body: second.body });
    assert.equal(event.type, 'task.completed');
    assert.equal(event.task.task_id, handover.taskId);
    assert.equal(event.task.state, 'completed');
    assert.equal(event.task.system, 'pay');
    assert.equal(event.task.deferred_because, 'attempts_exhausted');
    assert.equal(event.task.result.status, 201);
    assert.equal(event.task.result.headers['content-type'], 'application/json');
    assert.equal(event.task.result.body_kept, true);
    assert.deepEqual(answerJson(event.task), { paymentId: 'p-1' });
    const forged = (() => {
      try {
        verifyCallback({ secret: 'not-the-secret', signature: second.headers['ballast-signature'], body: second.body });
      } catch (e) {
        return e;
      }
    })();
    assert.ok(forged instanceof CallbackSignatureError && forged.kind === 'forged', String(forged));

    // Taken: not sent again.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    assert.equal(receiver.seen().length, 2);
    assert.equal(upstream.seen('/api/payments/called-back').filter((s) => s.status === 201).length, 1);
  });

  test('waitForTask is held by the gateway until the write ends, and has its answer', async () => {
    let down = true;
    upstream.on('/api/payments/waited', () =>
      down ? busy() : reply(201, '{"paymentId":"p-2"}', { 'content-type': 'application/json' }),
    );
    const handover = await ballast.writeOrDefer('pay', 'payments/waited', { key: newKey(), json: { amount: 5 } });
    assert.equal(handover.deferred, true);
    setTimeout(() => (down = false), 300);
    const before = answers.length;

    const done = await ballast.waitForTask(handover.taskId, { timeoutMs: PATIENCE_MS });

    assert.equal(done.state, 'completed');
    assert.equal(done.next_attempt_at, null);
    assert.equal(done.result.status, 201);
    assert.deepEqual(answerJson(done), { paymentId: 'p-2' });
    const asked = answers.slice(before).filter((a) => a.url.includes('/tasks/'));
    assert.ok(asked.length <= 2, `held, not polled: ${asked.length} requests`);
    assert.match(asked[0].url, /\?wait=\d+ms$/);
  });

  test('a wait that ends first rejects with TaskWaitTimeoutError and the task as last seen', async () => {
    upstream.on('/api/payments/stuck', () => busy());
    const key = newKey();
    const handover = await ballast.writeOrDefer('pay', 'payments/stuck', { key, json: {} });
    const started = Date.now();

    const error = await rejection(ballast.waitForTask(handover.taskId, { timeoutMs: 1500 }));

    assert.ok(error instanceof TaskWaitTimeoutError, String(error));
    assert.equal(error.taskId, handover.taskId);
    assert.ok(['pending', 'running'].includes(error.lastSeen.state), JSON.stringify(error.lastSeen));
    assert.equal(error.lastSeen.deferred_because, 'attempts_exhausted');
    assert.ok(Date.now() - started < 1500 + 2500, `gave up after ${Date.now() - started} ms`);

    // The same write again, while the first waits in the queue: it joins that task.
    const again = await ballast.writeOrDefer('pay', 'payments/stuck', { key, json: {} });
    assert.equal(again.deferred, true);
    assert.equal(again.taskId, handover.taskId, 'the same task, the same handle');
    // The brief's contract says already_deferred; a gateway may give the joined task's own reason instead.
    assert.ok(['already_deferred', 'attempts_exhausted'].includes(again.deferredBecause), again.deferredBecause);
  });

  test('a callback to a host not in [gateway] callback_hosts is refused unsent', async () => {
    upstream.on('/api/payments/elsewhere', () => reply(201, '{}'));

    const error = await rejection(
      ballast.writeOrDefer('pay', 'payments/elsewhere', { key: newKey(), json: {}, callback: 'https://hooks.example.com/cb' }),
    );

    assert.ok(error instanceof BallastError, String(error));
    assert.equal(error.reason, 'bad_callback');
    assert.equal(error.status, 400);
    assert.equal(upstream.seen('/api/payments/elsewhere').length, 0);
  });

  test("readiness is the gateway's own; /health/systems says which systems are down, 503 for a critical one", async () => {
    const health = async () => {
      const response = await fetch(`${served.admin}/health/systems`);
      return { status: response.status, body: await response.json() };
    };
    const statusOf = (report, name) => report.systems.find((s) => s.system === name)?.status;
    const up = await eventually('every system is up', async () => {
      const report = await ballast.systems();
      return report.status === 'up' && report;
    });
    assert.deepEqual(up.systems.map((s) => s.system).sort(), ['extra', 'pay', 'vital']);

    upstream.on('/extra/rates', () => busy());
    assert.equal((await ballast.read('extra', 'rates')).status, 503);
    const extraDown = await health();
    assert.equal(extraDown.status, 200, 'a system that is not critical does not fail it');
    assert.equal(extraDown.body.status, 'unavailable', 'the worst of all');
    assert.equal(statusOf(extraDown.body, 'extra'), 'unavailable');
    assert.equal(statusOf(extraDown.body, 'vital'), 'up');

    upstream.on('/vital/rates', () => busy());
    assert.equal((await ballast.read('vital', 'rates')).status, 503);
    const vitalDown = await health();
    assert.equal(vitalDown.status, 503, 'a critical system unavailable');
    assert.equal(statusOf(vitalDown.body, 'vital'), 'unavailable');
    const report = await ballast.systems();
    assert.equal(report.status, 'unavailable', 'systems() returns the 503 report');

    const readiness = await ballast.readiness();
    assert.equal(readiness.ready, true, "the gateway itself is fine: writes to vital are deferred, not lost");
    assert.equal(statusOf(readiness, 'vital'), 'unavailable');
    const unavailable = await rejection(ballast.read('vital', 'rates'));
    assert.ok(unavailable instanceof BallastError && unavailable.reason === 'breaker_open', String(unavailable));
  });
});

/**
 * A callback receiver on a free loopback port: records every request with
 * its raw body, and answers the status `answer(n)` gives (204 by default).
 */
async function startReceiver() {
  const requests = [];
  let answer = () => 204;
  const server = createServer((req, res) => {
    const chunks = [];
    req.on('data', (chunk) => chunks.push(chunk));
    req.on('end', () => {
      requests.push({ method: req.method, url: req.url, headers: req.headers, body: Buffer.concat(chunks) });
      res.writeHead(answer(requests.length), { connection: 'close' }).end();
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    answer: (f) => (answer = f),
    seen: () => [...requests],
    stop: () => {
      server.closeAllConnections();
      return new Promise((resolve) => server.close(resolve));
    },
  };
}
