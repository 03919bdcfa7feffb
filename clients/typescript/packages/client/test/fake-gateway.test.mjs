// @ballast/client/testing's FakeBallastGateway, through the real client:
// scripted answers in order, problems as the gateway sends them, 202
// hand-overs and their tasks ended by the test (held waits, signed
// callbacks), the gateway down, health, and what was sent.

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import {
  BallastError,
  GatewayUnreachableError,
  SystemUnavailableError,
  answerJson,
  keyFor,
  verifyCallback,
} from '@ballast/client';
import { FakeBallastGateway } from '@ballast/client/testing';

const key = keyFor('order-1', 'register-payment');

describe('FakeBallastGateway', () => {
  test('answers in the order scripted; the last answer stays', async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('sber', 'POST payments/register').problem('breaker_open', { retryAfter: 30 }).reply(201, { paymentId: 'p-1' });
    const sber = gateway.client().system('sber');

    const first = await sber.write('payments/register', { key, json: { amount: 100 } }).catch((e) => e);
    const second = await sber.write('payments/register', { key, json: { amount: 100 } });
    const third = await sber.write('payments/register', { key, json: { amount: 100 } });

    assert.ok(first instanceof SystemUnavailableError, String(first));
    assert.equal(first.retryAfter, 30);
    assert.equal(first.status, 503);
    assert.equal(first.system, 'sber');
    assert.deepEqual([second.status, await second.json()], [201, { paymentId: 'p-1' }]);
    assert.equal(third.status, 201);
    const calls = gateway.callsTo('sber', 'POST payments/register');
    assert.equal(calls.length, 3);
    assert.deepEqual(calls.map((c) => [c.key, c.json(), c.answered]), [
      [key, { amount: 100 }, 'problem'],
      [key, { amount: 100 }, 'reply'],
      [key, { amount: 100 }, 'reply'],
    ]);
  });

  test('the most specific route answers; unscripted paths get 404, unknown systems unknown_system', async () => {
    const gateway = new FakeBallastGateway({ systems: ['crm'] });
    gateway.on('sber').reply(200, 'anything');
    gateway.on('sber', 'orders/*').reply(200, { order: true });
    gateway.on('sber', 'GET orders/42').reply(200, { order: 42 });
    const ballast = gateway.client();

    assert.deepEqual(await (await ballast.read('sber', 'orders/42?expand=items')).json(), { order: 42 });
    assert.deepEqual(await (await ballast.read('sber', 'orders/7')).json(), { order: true });
    assert.equal(await (await ballast.read('sber', 'rates')).text(), 'anything');
    const unscripted = await ballast.read('crm', 'customers/1');
    assert.equal(unscripted.status, 404);
    assert.match(await unscripted.text(), /no answer scripted for GET crm\/customers\/1/);
    const unknown = await ballast.read('sbr', 'orders/1').catch((e) => e);
    assert.ok(unknown instanceof BallastError);
    assert.equal(unknown.reason, 'unknown_system');
    assert.equal(gateway.calls.at(-1).path, 'orders/1');
  });

  test('problems carry what the gateway puts in them', async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('sber', 'payments').problem('key_required').problem('transport', { sent: false }).problem('timeout');
    const sber = gateway.client().system('sber');

    const required = await sber.writeOnce('payments').catch((e) => e);
    const transport = await sber.writeOnce('payments').catch((e) => e);
    const timeout = await sber.writeOnce('payments').catch((e) => e);

    assert.deepEqual([required.reason, required.status, required.rule, required.attempts], ['key_required', 400, 'R-RES-RE-1', 0]);
    assert.deepEqual([transport.reason, transport.status, transport.sent], ['transport', 502, false]);
    assert.deepEqual([timeout.reason, timeout.status, timeout.attempts], ['timeout', 504, 1]);
  });

  test('the gateway down: refused, or cut after the request went out', async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('sber').unreachable().unreachable({ sent: true });
    const sber = gateway.client().system('sber');

    const refused = await sber.write('payments', { key, json: {} }).catch((e) => e);
    const cut = await sber.write('payments', { key, json: {} }).catch((e) => e);

    assert.ok(refused instanceof GatewayUnreachableError);
    assert.deepEqual([refused.sent, refused.outcomeUnknown, refused.code], [false, false, 'ECONNREFUSED']);
    assert.deepEqual([cut.sent, cut.outcomeUnknown], [true, true]);
  });

  test('a deferral: 202, a pending task, waitForTask held until the test completes it, a signed callback', async () => {
    const gateway = new FakeBallastGateway();
    const received = [];
    gateway.onCallback((callback) => received.push(callback));
    gateway.on('sber', 'POST payments/register').defer({ because: 'breaker_open' });
    const sber = gateway.client().system('sber');

    const out = await sber.writeOrDefer('payments/register', {
      key,
      json: { amount: 100 },
      callback: 'https://shop.example/ballast/callbacks',
    });
    assert.equal(out.deferred, true);
    assert.equal(out.deferredBecause, 'breaker_open');
    assert.ok(out.nextAttemptAt instanceof Date);
    assert.equal(out.location, `/tasks/${out.taskId}`);
    assert.equal((await sber.task(out.taskId)).state, 'pending');

    const again = await sber.writeOrDefer('payments/register', { key, json: { amount: 100 } });
    assert.equal(again.taskId, out.taskId, 'the same key joins the task it was deferred to');
    assert.equal(again.deferredBecause, 'already_deferred');

    const waiting = sber.waitForTask(out.taskId, { timeoutMs: 5_000 });
    await new Promise((resolve) => setTimeout(resolve, 20));
    const completed = await gateway.complete(out.taskId, { status: 201, json: { paymentId: 'p-7' } });
    const task = await waiting;

    assert.equal(task.state, 'completed');
    assert.deepEqual(answerJson(task), { paymentId: 'p-7' });
    assert.equal(completed.result.status, 201);
    assert.equal(task.system, 'sber');
    assert.equal(received.length, 1, 'one callback: the second write named none');
    const [callback] = received;
    assert.equal(callback.url, 'https://shop.example/ballast/callbacks');
    const event = verifyCallback({ secret: gateway.callbackSecret, signature: callback.signature, body: callback.body });
    assert.equal(event.type, 'task.completed');
    assert.equal(event.task.task_id, out.taskId);
    assert.deepEqual(gateway.callbacks, received);
    await assert.rejects(gateway.complete(out.taskId), /completed already/);
  });

  test('a deferral the call cannot take answers the problem the gateway would have', async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('sber').defer({ because: 'rate_limited' });

    const error = await gateway.client().write('sber', 'payments', { key, json: {} }).catch((e) => e);

    assert.ok(error instanceof SystemUnavailableError);
    assert.equal(error.reason, 'rate_limited');
    assert.equal(gateway.tasks.length, 0);
  });

  test('failed and cancelled tasks, and their callbacks', async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('sber').defer();
    const sber = gateway.client().system('sber');
    const cb = 'https://shop.example/cb';
    const declined = await sber.writeOrDefer('a', { key: keyFor(1, 'a'), callback: cb });
    const spent = await sber.writeOrDefer('b', { key: keyFor(2, 'b'), callback: cb });
    const cancelled = await sber.writeOrDefer('c', { key: keyFor(3, 'c'), callback: cb });

    await gateway.fail(declined.taskId, { json: { title: 'card declined' } });
    await gateway.fail(spent.taskId, { error: 'attempts exhausted: upstream answered 503' });
    await gateway.cancel(cancelled.taskId);

    assert.deepEqual(gateway.task(declined.taskId).result.status, 422);
    assert.equal(gateway.task(spent.taskId).result, undefined);
    assert.equal(gateway.task(spent.taskId).last_error, 'attempts exhausted: upstream answered 503');
    assert.deepEqual(gateway.callbacks.map((c) => c.type), ['task.failed', 'task.failed', 'task.cancelled']);
    assert.equal((await sber.waitForTask(cancelled.taskId)).state, 'cancelled');
  });

  test("a receiver's failure fails complete(): the test sees it", async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('sber').defer();
    gateway.onCallback(() => {
      throw new Error('the handler failed');
    });
    const out = await gateway.client().writeOrDefer('sber', 'p', { key, callback: 'https://shop.example/cb' });

    await assert.rejects(gateway.complete(out.taskId), /the handler failed/);
    assert.equal(gateway.task(out.taskId).state, 'completed');
  });

  test('health: the gateway ready, the systems up, degraded or unavailable', async () => {
    const gateway = new FakeBallastGateway();
    gateway.on('crm').reply(200);
    gateway.status('sber', 'degraded').status('sms', 'unavailable');
    const ballast = gateway.client();

    const report = await ballast.systems();
    assert.equal(report.status, 'unavailable');
    assert.deepEqual(
      report.systems.map((s) => [s.system, s.status, s.state]),
      [
        ['crm', 'up', 'closed'],
        ['sber', 'degraded', 'half_open'],
        ['sms', 'unavailable', 'open'],
      ],
    );
    assert.equal((await ballast.readiness()).ready, true);

    gateway.ready(false).status('sms', 'unavailable', { critical: true });
    assert.equal((await ballast.readiness()).ready, false);
    const direct = await gateway.fetch(`${gateway.adminUrl}/health/systems`);
    assert.equal(direct.status, 503, 'a critical system unavailable');
  });
});
