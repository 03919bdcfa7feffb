// @ballast/nestjs/testing: BallastTestingModule puts a Nest app on a fake
// gateway the test scripts — answers and problems reach the adapter as the
// gateway's would, a deferred write ends when the test says and its
// callback reaches the app's @OnBallastTask handlers, the systems' health
// is the test's to set — and a whole app's BallastModule can be pointed at
// the fake through BALLAST_OPTIONS.

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { describe, test } from 'node:test';

import { Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';

import {
  BALLAST_OPTIONS,
  BallastClient,
  BallastHealthIndicator,
  BallastModule,
  BallastTaskEvents,
  InjectBallast,
  OnBallastTask,
  SystemUnavailableError,
  answerJson,
  keyFor,
} from '@ballast/nestjs';
import { BallastTestingModule, FakeBallastGateway, startBallastServe } from '@ballast/nestjs/testing';

const CALLBACK = 'https://shop.example/ballast/callbacks';

/** The adapter under test: registers payments with Sber, deferred when they must be. */
class SberAdapter {
  constructor(sber) {
    this.sber = sber;
  }
  async register(orderId) {
    const out = await this.sber.writeOrDefer('payments/register', {
      key: keyFor(orderId, 'register-payment'),
      json: { orderId },
      callback: CALLBACK,
    });
    return out.deferred ? { state: 'deferred', task: out.taskId } : { state: 'registered', payment: await out.response.json() };
  }
}
InjectBallast('sber')(SberAdapter, undefined, 0);
Injectable()(SberAdapter);

/** The app's handler of how deferred payments ended. */
class Payments {
  registered = [];
  completed(event) {
    this.registered.push([event.task.task_id, answerJson(event.task).paymentId]);
  }
}
OnBallastTask('completed')(Payments.prototype, 'completed', Object.getOwnPropertyDescriptor(Payments.prototype, 'completed'));
Injectable()(Payments);

class SberModule {}
Module({ imports: [BallastModule.forFeature({ system: 'sber' })], providers: [SberAdapter, Payments] })(SberModule);

async function testApp() {
  const moduleRef = await Test.createTestingModule({
    imports: [BallastTestingModule.forRoot({ isGlobal: true }), SberModule],
  }).compile();
  await moduleRef.init();
  return { moduleRef, gateway: moduleRef.get(FakeBallastGateway), adapter: moduleRef.get(SberAdapter) };
}

describe('BallastTestingModule', () => {
  test("scripted answers and problems reach the adapter through forFeature's client", async () => {
    const { moduleRef, gateway, adapter } = await testApp();
    gateway.on('sber', 'POST payments/register').reply(201, { paymentId: 'p-1' }).problem('breaker_open', { retryAfter: 30 });

    assert.deepEqual(await adapter.register('order-1'), { state: 'registered', payment: { paymentId: 'p-1' } });
    const error = await adapter.register('order-2').catch((e) => e);
    assert.ok(error instanceof SystemUnavailableError, String(error));
    assert.equal(error.retryAfter, 30);
    assert.deepEqual(
      gateway.callsTo('sber').map((c) => [c.method, c.path, c.key, c.callback]),
      [
        ['POST', 'payments/register', keyFor('order-1', 'register-payment'), CALLBACK],
        ['POST', 'payments/register', keyFor('order-2', 'register-payment'), CALLBACK],
      ],
    );
    assert.equal(moduleRef.get(BallastClient), moduleRef.get(BallastClient), 'one client');
    await moduleRef.close();
  });

  test('a deferred write ends when the test says, and its callback reaches @OnBallastTask', async () => {
    const { moduleRef, gateway, adapter } = await testApp();
    gateway.on('sber', 'POST payments/register').defer({ because: 'breaker_open' });

    const out = await adapter.register('order-3');
    assert.equal(out.state, 'deferred');
    assert.deepEqual(moduleRef.get(Payments).registered, []);

    await gateway.complete(out.task, { status: 201, json: { paymentId: 'p-3' } });

    assert.deepEqual(moduleRef.get(Payments).registered, [[out.task, 'p-3']], 'handled before complete() returned');
    assert.equal(gateway.callbacks.length, 1);
    await moduleRef.close();
  });

  test('health: a deferrable system degraded keeps the app up, named; a required one unavailable does not', async () => {
    const { moduleRef, gateway } = await testApp();
    const health = moduleRef.get(BallastHealthIndicator);
    gateway.status('sber', 'degraded');

    assert.deepEqual(await health.systemsHealthy('systems'), {
      systems: { status: 'up', systems: { sber: 'degraded (half_open)' }, degraded: ['sber'] },
    });
    assert.equal((await health.isHealthy('ballast')).ballast.status, 'up');

    gateway.status('sber', 'unavailable');
    const down = await health.systemsHealthy('systems', { require: ['sber'] });
    assert.deepEqual([down.systems.status, down.systems.unavailable], ['down', ['sber']]);
    await moduleRef.close();
  });

  test('a given gateway, not global: its module exports the client to the module that imports it', async () => {
    const gateway = new FakeBallastGateway({ systems: ['crm'] });
    const moduleRef = await Test.createTestingModule({ imports: [BallastTestingModule.forRoot({ gateway })] }).compile();

    assert.equal(moduleRef.get(FakeBallastGateway), gateway);
    const answer = await moduleRef.get(BallastClient).read('crm', 'customers/1');
    assert.equal(answer.status, 404, 'unscripted: the system answers 404');
    assert.ok(moduleRef.get(BallastTaskEvents) instanceof BallastTaskEvents);
    await moduleRef.close();
  });
});

describe('a whole app on the fake gateway', () => {
  test("BALLAST_OPTIONS overridden, callbacks relayed to the app's own BallastTaskEvents", async () => {
    const SECRET = 'the-apps-callback-secret-0123456789';
    class AppModule {}
    Module({
      imports: [
        BallastModule.forRoot({ isGlobal: true, baseUrl: 'http://127.0.0.1:9465', callbacks: { secret: SECRET, path: false } }),
        SberModule,
      ],
    })(AppModule);
    const gateway = new FakeBallastGateway({ callbackSecret: SECRET });
    gateway.on('sber').defer();

    const moduleRef = await Test.createTestingModule({ imports: [AppModule] })
      .overrideProvider(BALLAST_OPTIONS)
      .useValue(gateway.clientOptions())
      .compile();
    await moduleRef.init();
    gateway.onCallback((callback) => moduleRef.get(BallastTaskEvents).receive(callback));

    const out = await moduleRef.get(SberAdapter).register('order-4');
    await gateway.complete(out.task, { status: 201, json: { paymentId: 'p-4' } });

    assert.deepEqual(moduleRef.get(Payments).registered, [[out.task, 'p-4']]);
    await moduleRef.close();
  });
});

test('startBallastServe says what is missing when the binary cannot be started', async () => {
  await assert.rejects(
    startBallastServe(new URL('./ballast.toml', import.meta.url), { bin: '/nonexistent/ballast', values: { upstream: 1 } }),
    /ballast serve did not start: \/nonexistent\/ballast: spawn .*ENOENT.*set BALLAST_BIN/s,
  );
  await assert.rejects(startBallastServe(new URL('./ballast.toml', import.meta.url)), /no value for \{upstream\}/);
});
