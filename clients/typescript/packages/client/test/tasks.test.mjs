// Following a deferred write, against a `fetch` that answers as the gateway's
// contract says: the 202's reason and next attempt, the callback header,
// waitForTask's held requests, timeouts and aborts, a task's kept answer,
// and the admin listener's readiness and systems.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  BallastError,
  MAX_TASK_WAIT_MS,
  TaskWaitTimeoutError,
  answerJson,
  createBallastClient,
  newKey,
} from '@ballast/client';

const HANDLE = '17.kM3pQ9';

/** A task as `GET /tasks/{handle}` shows it. */
function task(state, more = {}) {
  return {
    task_id: HANDLE,
    system: 'pay',
    state,
    attempts: 1,
    max_attempts: 10,
    last_error: state === 'pending' ? 'upstream answered 503' : null,
    run_at: 1_700_000_000,
    next_attempt_at: state === 'pending' ? 1_700_000_004.5 : null,
    deferred_because: 'attempts_exhausted',
    ...more,
  };
}

function json(status, body, headers = {}) {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
}

function problem(status, reason, headers = {}) {
  return new Response(JSON.stringify({ status, detail: reason, ballast: { reason, attempts: 0 } }), {
    status,
    headers: { 'content-type': 'application/problem+json', 'ballast-problem': reason, ...headers },
  });
}

/**
 * A client whose `fetch` answers with `answer(url, init, n)` (n counts from
 * 1), recording each request with when it was made; an answer that is a
 * function of the signal is held until it settles.
 */
function gateway(answer) {
  const sent = [];
  const ballast = createBallastClient({
    baseUrl: 'http://gateway.test',
    adminUrl: 'http://admin.test',
    token: 'gateway-token-0123456789',
    adminToken: 'admin-token',
    fetch: async (url, init) => {
      sent.push({ url: new URL(url), init, at: Date.now() });
      return answer(new URL(url), init, sent.length);
    },
  });
  return { ballast, sent };
}

/** An answer that never comes: rejects with the signal's reason once the request is aborted. */
function held(init) {
  return new Promise((_, reject) => {
    init.signal.addEventListener('abort', () => reject(init.signal.reason ?? new Error('aborted')), { once: true });
  });
}

describe('writeOrDefer', () => {
  test('a 202 of the gateway says why the write was deferred and when it is tried next', async () => {
    const { ballast, sent } = gateway(() =>
      json(
        202,
        { task_id: HANDLE, state: 'pending', deferred_because: 'breaker_open', next_attempt_at: 1_700_000_012.25 },
        {
          'preference-applied': 'respond-async',
          location: `/tasks/${HANDLE}`,
          'ballast-attempts': '0',
          'retry-after': '13',
        },
      ),
    );

    const handover = await ballast.writeOrDefer('pay', 'orders/42/confirm', {
      key: newKey(),
      json: {},
      callback: 'https://shop.example/ballast/callbacks?tenant=7',
    });

    assert.deepEqual(handover, {
      deferred: true,
      taskId: HANDLE,
      location: `/tasks/${HANDLE}`,
      attempts: 0,
      deferredBecause: 'breaker_open',
      nextAttemptAt: new Date(1_700_000_012_250),
    });
    const headers = sent[0].init.headers;
    assert.equal(headers.get('ballast-callback'), 'https://shop.example/ballast/callbacks?tenant=7');
    assert.equal(headers.get('prefer'), 'respond-async');
  });

  test('a deferral whose next attempt is unknown, and one joining an earlier deferral of its key', async () => {
    const bodies = [
      { task_id: HANDLE, state: 'pending', deferred_because: 'sequence_pending', next_attempt_at: null },
      { task_id: HANDLE, state: 'running', deferred_because: 'already_deferred', next_attempt_at: 1_700_000_000 },
      { task_id: null, state: 'pending', deferred_because: null, next_attempt_at: null }, // a task an older ballast stored
    ];
    const { ballast, sent } = gateway((_, __, n) =>
      json(202, bodies[n - 1], { 'preference-applied': 'respond-async', location: `/tasks/${HANDLE}` }),
    );

    const first = await ballast.writeOrDefer('pay', 'p', { key: newKey(), body: 'raw' });
    const second = await ballast.writeOrDefer('pay', 'p', { key: newKey(), body: 'raw' });
    const old = await ballast.writeOrDefer('pay', 'p', { key: newKey(), body: 'raw' });

    assert.equal(first.deferredBecause, 'sequence_pending');
    assert.equal(first.nextAttemptAt, null);
    assert.equal(second.deferredBecause, 'already_deferred');
    assert.equal(second.nextAttemptAt.getTime(), 1_700_000_000_000);
    assert.deepEqual([old.taskId, old.deferredBecause, old.nextAttemptAt], [null, null, null]);
    assert.equal(sent[0].init.headers.has('ballast-callback'), false, 'no callback unless asked for');
  });

  test('a callback that is no absolute http(s) URL is refused unsent', async () => {
    const { ballast, sent } = gateway(() => assert.fail('nothing may be sent'));
    for (const callback of ['/ballast/callbacks', 'shop.example/cb', 'ftp://shop.example/cb', '', 'https://u:p@shop.example/cb']) {
      await assert.rejects(ballast.writeOrDefer('pay', 'p', { key: newKey(), callback }), /callback/, callback);
    }
    assert.equal(sent.length, 0);
  });
});

describe('waitForTask', () => {
  test('asks with ?wait= until the task is final, and returns it', async () => {
    const { ballast, sent } = gateway((url, _, n) => json(200, n === 1 ? task('running') : task('completed')));

    const done = await ballast.waitForTask(HANDLE);

    assert.equal(done.state, 'completed');
    assert.equal(sent.length, 2);
    for (const { url, init } of sent) {
      assert.equal(url.pathname, `/tasks/${HANDLE}`);
      assert.equal(url.searchParams.get('wait'), `${MAX_TASK_WAIT_MS}ms`, 'at most 30 s held per request');
      assert.equal(init.method, 'GET');
      assert.equal(init.headers.get('authorization'), 'Bearer gateway-token-0123456789');
    }
    assert.ok(sent[1].at - sent[0].at >= 900, 'a gateway answering at once is not asked in a busy loop');
  });

  test('failed and cancelled are final too: they come back, not thrown', async () => {
    for (const state of ['failed', 'cancelled']) {
      const { ballast } = gateway(() => json(200, task(state, { last_error: 'upstream answered 422' })));
      assert.equal((await ballast.waitForTask(HANDLE)).state, state);
    }
  });

  test('a timeout asks for no longer wait than is left, then rejects naming the handle and the last state', async () => {
    const { ballast, sent } = gateway(() => json(200, task('pending')));
    const started = Date.now();

    const error = await ballast.waitForTask(HANDLE, { timeoutMs: 300 }).then(
      () => assert.fail('expected a timeout'),
      (e) => e,
    );

    assert.ok(error instanceof TaskWaitTimeoutError, String(error));
    assert.equal(error.name, 'TaskWaitTimeoutError');
    assert.equal(error.taskId, HANDLE);
    assert.equal(error.timeoutMs, 300);
    assert.equal(error.lastSeen.state, 'pending');
    assert.match(error.message, new RegExp(`${HANDLE.replace('.', '\\.')}: still pending after 1 attempts`));
    const took = Date.now() - started;
    assert.ok(took >= 290 && took < 900, `gave up after ${took} ms`);
    const wait = Number(sent[0].url.searchParams.get('wait').replace(/ms$/, ''));
    assert.ok(wait <= 300 && wait > 200, `asked to wait ${wait} ms`);
  });

  test('a gateway that holds the request past the timeout is cut off', async () => {
    const { ballast } = gateway((_, init) => held(init));
    const started = Date.now();

    const error = await ballast.waitForTask(HANDLE, { timeoutMs: 100 }).then(
      () => assert.fail('expected a timeout'),
      (e) => e,
    );

    assert.ok(error instanceof TaskWaitTimeoutError, String(error));
    assert.equal(error.lastSeen, undefined);
    assert.match(error.message, /not seen/);
    const took = Date.now() - started;
    assert.ok(took >= 100 && took < 2500, `cut off after ${took} ms`);
  });

  test("an abort rejects with the signal's reason, while a request is held or between requests", async () => {
    const holding = gateway((_, init) => held(init));
    const controller = new AbortController();
    const reason = new Error('the user left');
    setTimeout(() => controller.abort(reason), 50);
    await assert.rejects(holding.ballast.waitForTask(HANDLE, { signal: controller.signal }), (e) => e === reason);

    const pausing = gateway(() => json(200, task('pending')));
    const signal = AbortSignal.timeout(200);
    const error = await pausing.ballast.waitForTask(HANDLE, { signal }).then(
      () => assert.fail('expected an abort'),
      (e) => e,
    );
    assert.equal(error.name, 'TimeoutError', 'AbortSignal.timeout says why itself');
    assert.equal(pausing.sent.length, 1, 'aborted in the pause before the second request');

    await assert.rejects(
      pausing.ballast.waitForTask(HANDLE, { signal: AbortSignal.abort() }),
      (e) => e.name === 'AbortError',
    );
  });

  test('too_many_waiters: waits its Retry-After and asks again', async () => {
    const { ballast, sent } = gateway((_, __, n) =>
      n === 1 ? problem(503, 'too_many_waiters', { 'retry-after': '1' }) : json(200, task('completed')),
    );

    const done = await ballast.waitForTask(HANDLE, { timeoutMs: 5000 });

    assert.equal(done.state, 'completed');
    assert.ok(sent[1].at - sent[0].at >= 950, `asked again after ${sent[1].at - sent[0].at} ms`);
  });

  test("the gateway's other problems are thrown as they are", async () => {
    const { ballast, sent } = gateway(() => problem(404, 'not_found'));

    const error = await ballast.waitForTask('987654').then(
      () => assert.fail('expected not_found'),
      (e) => e,
    );

    assert.ok(error instanceof BallastError, String(error));
    assert.equal(error.reason, 'not_found');
    assert.equal(error.taskId, '987654');
    assert.equal(sent.length, 1, 'not asked again');
    await assert.rejects(ballast.waitForTask(''), /name the deferred write/);
    await assert.rejects(ballast.waitForTask(HANDLE, { timeoutMs: -1 }), /timeoutMs/);
  });

  test('timeoutMs 0 asks once, without holding', async () => {
    const { ballast, sent } = gateway(() => json(200, task('pending')));
    await assert.rejects(ballast.waitForTask(HANDLE, { timeoutMs: 0 }), TaskWaitTimeoutError);
    assert.equal(sent.length, 1);
    assert.equal(sent[0].url.search, '');
  });

  test('task() takes a signal', async () => {
    const { ballast, sent } = gateway(() => json(200, task('pending')));
    const controller = new AbortController();
    assert.equal((await ballast.task(HANDLE, { signal: controller.signal })).state, 'pending');
    assert.equal(sent[0].url.search, '', 'task() asks for now');
    assert.equal(sent[0].init.signal, controller.signal);
  });
});

describe('answerJson', () => {
  const result = (more) => ({ status: 201, headers: { 'content-type': 'application/json' }, body_size: 0, body_kept: true, ...more });

  test("the kept answer's JSON body", () => {
    const done = task('completed', { result: result({ body: '{"paymentId":"p-1"}', body_size: 19 }) });
    assert.deepEqual(answerJson(done), { paymentId: 'p-1' });
    const declined = task('failed', { result: result({ status: 422, body: '{"title":"declined"}' }) });
    assert.deepEqual(answerJson(declined), { title: 'declined' }, 'whatever the status: check it first');
  });

  test('no answer, a body not kept, not text, empty or not JSON: a clear error', () => {
    assert.throws(() => answerJson(task('pending')), /17\.kM3pQ9 has no answer \(it is pending\)/);
    assert.throws(
      () => answerJson(task('completed', { result: result({ body_size: 5_000_000, body_kept: false }) })),
      /answered 201 with a body of 5000000 bytes, more than \[queue\] keep_answer keeps/,
    );
    assert.throws(
      () => answerJson(task('completed', { result: result({ body_base64: '/w==', body_size: 1 }) })),
      /not UTF-8 text \(see result\.body_base64\)/,
    );
    assert.throws(() => answerJson(task('completed', { result: result({ status: 204 }) })), /204 with an empty body/);
    assert.throws(() => answerJson(task('completed', { result: result({ body: '' }) })), /201 with an empty body/);
    assert.throws(() => answerJson(task('completed', { result: result({ body: 'OK' }) })), SyntaxError);
    assert.throws(
      () => answerJson(task('completed', { result: { status: 201, answer_error: 'the answer is sealed and does not open: no key' } })),
      /answered 201, and its answer cannot be read: the answer is sealed/,
    );
    assert.throws(() => answerJson(task('completed', { result: { status: 201 } })), /kept only the status/);
  });
});

describe('the admin listener', () => {
  const systems = [
    { system: 'pay', critical: true, status: 'unavailable', state: 'open', since_secs: 2, next_probe_in_secs: 28 },
    { system: 'sms', critical: false, status: 'degraded', state: 'half_open', since_secs: 1, next_probe_in_secs: null },
  ];

  test('systems(): /health/systems, its report with a 503 as with a 200', async () => {
    const { ballast, sent } = gateway((url) => json(503, { status: 'unavailable', systems }));

    const report = await ballast.systems();

    assert.deepEqual(report, { status: 'unavailable', systems });
    assert.equal(sent[0].url.href, 'http://admin.test/health/systems');
    assert.equal(sent[0].init.headers.get('authorization'), 'Bearer admin-token');
  });

  test('readiness(): ready while the queue answers, whatever the systems', async () => {
    const { ballast } = gateway(() => json(200, { ready: true, systems, queue: { reachable: true, checked_at: 1 } }));
    const readiness = await ballast.readiness();
    assert.equal(readiness.ready, true);
    assert.equal(readiness.systems[0].status, 'unavailable');
  });

  test('another answer is an error naming it: a ballast from before /health/systems answers 404', async () => {
    const { ballast } = gateway(() => new Response('not found\n', { status: 404 }));
    await assert.rejects(ballast.systems(), /GET http:\/\/admin\.test\/health\/systems answered 404: not found/);
  });
});
