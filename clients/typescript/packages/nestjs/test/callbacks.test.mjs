// BallastModule's `callbacks`: the controller the gateway POSTs the ends of
// deferred writes to, reached over HTTP (a test platform on node:http), its
// answers — 204, 401, 400, 500 — and the handlers and listeners it calls.

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { after, afterEach, describe, test } from 'node:test';

import { Injectable, Module, Scope } from '@nestjs/common';
import { HTTP_CODE_METADATA, METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants.js';
import { NestFactory } from '@nestjs/core';
import { Test } from '@nestjs/testing';

import {
  BALLAST_CALLBACK_OPTIONS,
  BALLAST_OPTIONS,
  BallastModule,
  BallastTaskEvents,
  CallbackSignatureError,
  OnBallastTask,
  answerJson,
  signCallback,
} from '@ballast/nestjs';

import { NodeHttpAdapter } from './node-http-adapter.mjs';

const SECRET = 'callback-secret-0123456789abcdef';

/** A task as a callback carries it. */
function taskOf(state, id = '17.kM3p') {
  const result =
    state === 'cancelled'
      ? undefined
      : {
          status: state === 'completed' ? 201 : 422,
          headers: { 'content-type': 'application/json' },
          body: state === 'completed' ? '{"paymentId":"p-1"}' : '{"title":"declined"}',
          body_size: 19,
          body_kept: true,
        };
  return {
    task_id: id,
    system: 'sber',
    state,
    attempts: 2,
    max_attempts: 10,
    last_error: null,
    run_at: 1_700_000_000,
    next_attempt_at: null,
    deferred_because: 'breaker_open',
    ...(result ? { result } : {}),
  };
}

/** Decorates `Class.prototype[name]` with `@OnBallastTask(...outcomes)` (this is JavaScript). */
function onTask(Class, name, ...outcomes) {
  OnBallastTask(...outcomes)(Class.prototype, name, Object.getOwnPropertyDescriptor(Class.prototype, name));
}

/** The reconciler of the examples: records what it was called with; fails on cue. */
class Reconciler {
  calls = [];
  failNext = 0;
  async confirmed(event) {
    this.calls.push(['confirmed', event]);
    if (this.failNext > 0) {
      this.failNext--;
      throw new Error('the database is down');
    }
  }
  notConfirmed(event) {
    this.calls.push(['notConfirmed', event]);
  }
  everything(event) {
    this.calls.push(['everything', event]);
  }
}
onTask(Reconciler, 'confirmed', 'completed');
onTask(Reconciler, 'notConfirmed', 'failed');
onTask(Reconciler, 'notConfirmed', 'cancelled'); // decorators add up
onTask(Reconciler, 'everything');
Injectable()(Reconciler);

/** The same handler on a request-scoped provider: there is no instance to call. */
class PerRequest {
  static called = 0;
  handle() {
    PerRequest.called++;
  }
}
onTask(PerRequest, 'handle', 'completed');
Injectable({ scope: Scope.REQUEST })(PerRequest);

const apps = [];

/** The app over HTTP: BallastModule with `callbacks`, the reconciler; its URL and a way to POST callbacks. */
async function callbackApp({ callbacks = { secret: SECRET }, rawBody = true, providers = [Reconciler] } = {}) {
  class AppModule {}
  Module({ imports: [BallastModule.forRoot({ callbacks })], providers })(AppModule);
  // abortOnError: false, or a mistake in here exits the test process without a word.
  const app = await NestFactory.create(AppModule, new NodeHttpAdapter(), { rawBody, logger: false, abortOnError: false });
  await app.listen(0, '127.0.0.1');
  apps.push(app);
  const url = `${await app.getUrl()}/${callbacks.path ?? 'ballast/callbacks'}`;
  /** POSTs `event` as the gateway would: signed, with a delivery id; `as` changes what is sent. */
  const post = async (event, as = {}) => {
    const body = as.body ?? JSON.stringify(event);
    const headers = { 'content-type': 'application/json', 'ballast-task': event.task.task_id };
    if (as.signature !== null) headers['ballast-signature'] = as.signature ?? signCallback(as.secret ?? SECRET, body);
    if (as.delivery !== null) headers['ballast-delivery'] = as.delivery ?? 'delivery-1';
    const response = await fetch(url, { method: 'POST', headers, body });
    return { status: response.status, text: await response.text() };
  };
  const reconciler = providers.includes(Reconciler) ? app.get(Reconciler) : undefined;
  return { app, post, reconciler, events: app.get(BallastTaskEvents) };
}

afterEach(async () => {
  while (apps.length) await apps.pop().close();
});

describe('callbacks through BallastModule', () => {
  test('a genuine callback reaches the handlers of its outcome and the listeners, once: 204', async () => {
    const { post, reconciler, events } = await callbackApp();
    const heard = [];
    const unsubscribe = events.subscribe(async (event) => heard.push(event));

    const first = await post({ type: 'task.completed', task: taskOf('completed') }, { delivery: 'd-1' });
    const repeat = await post({ type: 'task.completed', task: taskOf('completed') }, { delivery: 'd-1' });

    assert.deepEqual([first.status, first.text], [204, '']);
    assert.equal(repeat.status, 204, 'a repeat is answered 2xx too, or the gateway sends it forever');
    assert.deepEqual(
      reconciler.calls.map(([name]) => name).sort(),
      ['confirmed', 'everything'],
      'the handlers of task.completed, once',
    );
    const [, event] = reconciler.calls[0];
    assert.equal(event.type, 'task.completed');
    assert.equal(event.outcome, 'completed');
    assert.equal(event.delivery, 'd-1');
    assert.equal(event.task.task_id, '17.kM3p');
    assert.deepEqual(answerJson(event.task), { paymentId: 'p-1' });
    assert.equal(heard.length, 1);
    assert.equal(heard[0].delivery, 'd-1');

    unsubscribe();
    const failed = await post({ type: 'task.failed', task: taskOf('failed') }, { delivery: 'd-2' });
    const cancelled = await post({ type: 'task.cancelled', task: taskOf('cancelled') }, { delivery: 'd-3' });
    assert.deepEqual([failed.status, cancelled.status], [204, 204]);
    assert.deepEqual(
      reconciler.calls.slice(2).map(([name, e]) => `${name} ${e.outcome}`).sort(),
      ['everything cancelled', 'everything failed', 'notConfirmed cancelled', 'notConfirmed failed'],
    );
    assert.equal(heard.length, 1, 'unsubscribed');
  });

  test('a forged, stale or unsigned callback is 401 and reaches no one', async () => {
    const { post, reconciler } = await callbackApp();
    const event = { type: 'task.completed', task: taskOf('completed') };
    const body = JSON.stringify(event);
    const hourAgo = Math.floor(Date.now() / 1000) - 3600;

    const answers = [
      await post(event, { secret: 'not-the-secret' }),
      await post(event, { body: body.replace('201', '200'), signature: signCallback(SECRET, body) }),
      await post(event, { signature: signCallback(SECRET, body, hourAgo) }),
      await post(event, { signature: null }),
      await post(event, { signature: 'sha256=abc' }),
    ];

    assert.deepEqual(
      answers.map((a) => a.status),
      [401, 401, 401, 401, 401],
    );
    assert.match(answers[2].text, /more than the 300 s allowed/);
    assert.equal(reconciler.calls.length, 0);
  });

  test('a handler that throws makes it 500; the repeat runs the handlers again and is 204', async () => {
    const { post, reconciler } = await callbackApp();
    reconciler.failNext = 1;
    const event = { type: 'task.completed', task: taskOf('completed') };

    const failed = await post(event, { delivery: 'd-retry' });
    const retried = await post(event, { delivery: 'd-retry' });
    const after = await post(event, { delivery: 'd-retry' });

    assert.equal(failed.status, 500);
    assert.match(failed.text, /the gateway will send it again/);
    assert.doesNotMatch(failed.text, /database/, "the handler's error stays in the app's log");
    assert.equal(retried.status, 204);
    assert.equal(after.status, 204);
    assert.deepEqual(
      reconciler.calls.map(([name]) => name),
      ['confirmed', 'everything', 'confirmed', 'everything'],
      'every handler again on the repeat: they must bear it; nothing after it was handled',
    );
  });

  test('repeats arriving together run the handlers once', async () => {
    const { post, events } = await callbackApp({ providers: [] });
    let calls = 0;
    events.subscribe(async () => {
      calls++;
      await new Promise((resolve) => setTimeout(resolve, 100));
    });
    const event = { type: 'task.cancelled', task: taskOf('cancelled') };

    const answers = await Promise.all([1, 2, 3].map(() => post(event, { delivery: 'd-together' })));

    assert.deepEqual(
      answers.map((a) => a.status),
      [204, 204, 204],
    );
    assert.equal(calls, 1);
  });

  test('remember bounds what is remembered: the oldest delivery is forgotten first', async () => {
    const { post, events } = await callbackApp({ callbacks: { secret: SECRET, remember: 2 }, providers: [] });
    const seen = [];
    events.subscribe((event) => seen.push(event.delivery));
    const event = { type: 'task.failed', task: taskOf('failed') };

    for (const delivery of ['a', 'b', 'c', 'c', 'b', 'a']) await post(event, { delivery });

    assert.deepEqual(seen, ['a', 'b', 'c', 'a'], 'b and c remembered, a forgotten');
  });

  test('without the raw body it is 500, saying how to set it up; without Ballast-Delivery, 400', async () => {
    const bare = await callbackApp({ rawBody: false });
    const unverifiable = await bare.post({ type: 'task.completed', task: taskOf('completed') });
    assert.equal(unverifiable.status, 500, 'the gateway repeats it once the app is fixed');
    assert.equal(bare.reconciler.calls.length, 0);

    const { post, reconciler } = await callbackApp();
    const anonymous = await post({ type: 'task.completed', task: taskOf('completed') }, { delivery: null });
    assert.equal(anonymous.status, 400);
    assert.match(anonymous.text, /ballast-delivery/);
    assert.equal(reconciler.calls.length, 0);
  });

  test("a request-scoped provider's handlers are not called", async () => {
    const { post } = await callbackApp({ providers: [Reconciler, PerRequest] });
    assert.equal((await post({ type: 'task.completed', task: taskOf('completed') })).status, 204);
    assert.equal(PerRequest.called, 0);
  });

  test('with no handler at all it is 204 all the same: nothing would ever take it', async () => {
    const { post } = await callbackApp({ providers: [] });
    assert.equal((await post({ type: 'task.completed', task: taskOf('completed') })).status, 204);
  });

  test('another path; secretEnv', async () => {
    process.env.BALLAST_TEST_CALLBACK_SECRET = SECRET;
    const { post, reconciler } = await callbackApp({
      callbacks: { secretEnv: 'BALLAST_TEST_CALLBACK_SECRET', path: 'hooks/ballast' },
    });
    assert.equal((await post({ type: 'task.completed', task: taskOf('completed') })).status, 204);
    assert.equal(reconciler.calls.length, 2);
  });
});

describe('BallastModule with callbacks, as a module', () => {
  test("the controller's route: POST /ballast/callbacks, 204; none with path: false", () => {
    const dynamic = BallastModule.forRoot({ callbacks: { secret: SECRET } });
    const [controller] = dynamic.controllers;
    assert.equal(Reflect.getMetadata(PATH_METADATA, controller), 'ballast/callbacks');
    assert.equal(Reflect.getMetadata(METHOD_METADATA, controller.prototype.receive), 1 /* RequestMethod.POST */);
    assert.equal(Reflect.getMetadata(HTTP_CODE_METADATA, controller.prototype.receive), 204);
    assert.ok(dynamic.exports.includes(BallastTaskEvents));

    assert.deepEqual(BallastModule.forRoot({ callbacks: { secret: SECRET, path: false } }).controllers, []);
    assert.equal(BallastModule.forRoot({}).controllers, undefined, 'no callbacks, no controller');
  });

  test('receive() without a controller of its own; the options stay apart from the client', async () => {
    const app = await Test.createTestingModule({
      imports: [BallastModule.forRoot({ baseUrl: 'http://127.0.0.1:9465', callbacks: { secret: SECRET, path: false } })],
      providers: [Reconciler],
    }).compile();
    await app.init();
    assert.deepEqual(app.get(BALLAST_OPTIONS), { baseUrl: 'http://127.0.0.1:9465' });
    assert.equal(app.get(BALLAST_CALLBACK_OPTIONS).path, false);

    const events = app.get(BallastTaskEvents);
    const body = JSON.stringify({ type: 'task.failed', task: taskOf('failed') });
    const signature = signCallback(SECRET, body);
    assert.equal(await events.receive({ signature, delivery: 'x', body }), 'handled');
    assert.equal(await events.receive({ signature, delivery: 'x', body: Buffer.from(body) }), 'duplicate');
    await assert.rejects(events.receive({ signature, delivery: '', body }), /no ballast-delivery header/);
    await assert.rejects(
      events.receive({ signature: signCallback('other', body), delivery: 'y', body }),
      (e) => e instanceof CallbackSignatureError && e.kind === 'forged',
    );
    assert.deepEqual(
      app.get(Reconciler).calls.map(([name]) => name).sort(),
      ['everything', 'notConfirmed'],
    );
    await app.close();
  });

  test('forRootAsync takes callbacks beside its factory', async () => {
    const app = await Test.createTestingModule({
      imports: [BallastModule.forRootAsync({ useFactory: () => ({ baseUrl: 'http://gw' }), callbacks: { secret: SECRET } })],
    }).compile();
    assert.ok(app.get(BallastTaskEvents) instanceof BallastTaskEvents);
    assert.deepEqual(app.get(BALLAST_OPTIONS), { baseUrl: 'http://gw' });
    await app.close();
  });

  test('a missing secret stops the app at startup, saying which', async () => {
    delete process.env.BALLAST_TEST_UNSET_SECRET;
    const compile = (callbacks) => Test.createTestingModule({ imports: [BallastModule.forRoot({ callbacks })] }).compile();
    await assert.rejects(compile({ secretEnv: 'BALLAST_TEST_UNSET_SECRET' }), /BALLAST_TEST_UNSET_SECRET is not set/);
    await assert.rejects(compile({}), /give secret, or secretEnv/);
    await assert.rejects(compile({ secret: 'a', secretEnv: 'B' }), /not both/);
  });

  test('OnBallastTask refuses an outcome there is not, and a system without a name', () => {
    assert.throws(() => OnBallastTask('done'), /an outcome is one of completed, failed, cancelled/);
    assert.throws(() => OnBallastTask('completed', { system: '' }), /name a system/);
  });

  test('OnBallastTask({ system }) takes the deferred writes of that system only', async () => {
    class PerSystem {
      calls = [];
      sber(event) {
        this.calls.push(['sber', event.outcome, event.task.system]);
      }
      crmFailures(event) {
        this.calls.push(['crm', event.outcome, event.task.system]);
      }
      any(event) {
        this.calls.push(['any', event.outcome, event.task.system]);
      }
    }
    onTask(PerSystem, 'sber', { system: 'sber' });
    onTask(PerSystem, 'crmFailures', 'failed', { system: 'crm' });
    onTask(PerSystem, 'any', 'completed');
    Injectable()(PerSystem);
    const app = await Test.createTestingModule({
      imports: [BallastModule.forRoot({ callbacks: { secret: SECRET, path: false } })],
      providers: [PerSystem],
    }).compile();
    await app.init();
    const events = app.get(BallastTaskEvents);
    const send = (type, system, delivery) => {
      const body = JSON.stringify({ type, task: { ...taskOf(type.slice(5)), system } });
      return events.receive({ signature: signCallback(SECRET, body), delivery, body });
    };

    await send('task.completed', 'sber', 'd1');
    await send('task.failed', 'crm', 'd2');
    await send('task.completed', 'crm', 'd3');

    assert.deepEqual(app.get(PerSystem).calls.sort(), [
      ['any', 'completed', 'crm'],
      ['any', 'completed', 'sber'],
      ['crm', 'failed', 'crm'],
      ['sber', 'completed', 'sber'],
    ]);
    await app.close();
  });
});

after(async () => {
  while (apps.length) await apps.pop().close();
});
