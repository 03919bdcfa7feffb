// The reconciler as a handler, end to end: a Nest app writes through a real
// `ballast serve` with a callback URL of its own; the write is deferred, the
// upstream recovers, and the gateway POSTs the end to the app, which calls
// its @OnBallastTask handler — again after the handler failed once.
//
//   BALLAST_BIN=target/debug/ballast npm test -w @ballast/nestjs
//
// Needs a ballast with the deferral contract of clients/typescript/README.md
// (`Ballast-Callback`, `[gateway] callback_secret_env`).

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { Inject, Injectable, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';

import { BallastClient, BallastModule, OnBallastTask, answerJson, keyFor } from '@ballast/nestjs';

import {
  PATIENCE_MS,
  TOKEN,
  busy,
  eventually,
  freePort,
  reply,
  startBallast,
  startUpstream,
} from '../../../test-support/serve.mjs';
import { NodeHttpAdapter } from './node-http-adapter.mjs';

const SECRET = 'callback-secret-0123456789abcdef';

/** The guide's confirmation poller, as a handler: marks an order confirmed when the gateway says so. */
class Confirmations {
  confirmed = new Map();
  failures = 1; // the first callback fails: the gateway must send it again
  deliveries = [];

  constructor(ballast) {
    this.ballast = ballast;
  }

  /** Confirms order `id` through the gateway, naming where the end of a deferral goes. */
  confirm(id, callback) {
    return this.ballast.writeOrDefer('sber', `orders/${id}/confirm`, { key: keyFor(id, 'confirm'), json: {}, callback });
  }

  async onConfirmed(event) {
    this.deliveries.push(event.delivery);
    if (this.failures-- > 0) throw new Error('the orders database is down');
    this.confirmed.set(event.task.task_id, answerJson(event.task));
  }
}
Inject(BallastClient)(Confirmations, undefined, 0);
OnBallastTask('completed')(
  Confirmations.prototype,
  'onConfirmed',
  Object.getOwnPropertyDescriptor(Confirmations.prototype, 'onConfirmed'),
);
Injectable()(Confirmations);

describe('callbacks from a real ballast serve to a Nest app', { timeout: 3 * PATIENCE_MS }, () => {
  let upstream;
  let served;
  let app;
  let url;

  before(async () => {
    upstream = await startUpstream();
    process.env.BALLAST_TEST_CALLBACK_SECRET = SECRET;
    const port = await freePort();
    served = await startBallast(new URL('callbacks.toml', import.meta.url), { upstream: upstream.port, app: port });
    class AppModule {}
    Module({
      imports: [
        BallastModule.forRoot({
          baseUrl: served.gateway,
          token: TOKEN,
          callbacks: { secretEnv: 'BALLAST_TEST_CALLBACK_SECRET' },
        }),
      ],
      providers: [Confirmations],
    })(AppModule);
    app = await NestFactory.create(AppModule, new NodeHttpAdapter(), {
      rawBody: true,
      logger: false,
      abortOnError: false,
    });
    await app.listen(port, '127.0.0.1');
    url = await app.getUrl();
  });

  after(async () => {
    await app?.close();
    await served?.stop();
    await upstream?.stop();
  });

  test('a deferred confirmation reaches its handler, repeated until the handler takes it', async () => {
    let down = true;
    upstream.on('/orders/42/confirm', () =>
      down ? busy() : reply(200, '{"orderNumber":"42","status":"CONFIRMED"}', { 'content-type': 'application/json' }),
    );
    const confirmations = app.get(Confirmations);

    const out = await confirmations.confirm('42', `${url}/ballast/callbacks`);
    assert.equal(out.deferred, true);
    down = false;

    const answer = await eventually('the handler takes the callback', () => confirmations.confirmed.get(out.taskId));
    assert.deepEqual(answer, { orderNumber: '42', status: 'CONFIRMED' });
    assert.equal(confirmations.deliveries.length, 2, 'failed once, then sent again');
    assert.equal(confirmations.deliveries[0], confirmations.deliveries[1], 'the same delivery');
    assert.equal(upstream.seen('/orders/42/confirm').filter((s) => s.status === 200).length, 1);
  });
});
