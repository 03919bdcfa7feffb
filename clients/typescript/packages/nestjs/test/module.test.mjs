// BallastModule in a Nest application: forRoot, forRootAsync from a
// factory, a class or an existing provider (Nest's ConfigurableModuleBuilder
// options), isGlobal or not, the one client it provides, and forFeature's
// clients bound to one system, injected with @InjectBallast.

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { after, before, describe, test } from 'node:test';

import { Inject, Injectable, Module } from '@nestjs/common';
import { ConfigModule, ConfigService } from '@nestjs/config';
import { Test } from '@nestjs/testing';
import * as client from '@ballast/client';

import {
  BALLAST_OPTIONS,
  BallastClient,
  BallastHealthIndicator,
  BallastModule,
  InjectBallast,
  SystemUnavailableError,
  getBallastToken,
  keyFor,
} from '@ballast/nestjs';

const TOKEN = 'nest-token-0123456789abcdef';

/** A local "gateway": records each request, answers what `answer` says (200 by default). */
async function fakeGateway() {
  const seen = [];
  let answer = () => ({ status: 200, headers: {}, body: '{}' });
  const server = createServer((req, res) => {
    seen.push({ url: req.url, method: req.method, headers: req.headers });
    req.resume().on('end', () => {
      const { status, headers, body } = answer(req);
      res.writeHead(status, headers).end(body);
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    answer: (f) => (answer = f),
    stop: () => new Promise((resolve) => server.close(resolve)),
  };
}

/** A provider of a feature module that did not import BallastModule (decorated by hand: this is JavaScript). */
class Payments {
  constructor(ballast) {
    this.ballast = ballast;
  }
}
Inject(BallastClient)(Payments, undefined, 0);
Injectable()(Payments);

class PaymentsModule {}
Module({ providers: [Payments], exports: [Payments] })(PaymentsModule);

describe('BallastModule', () => {
  let gateway;
  before(async () => {
    gateway = await fakeGateway();
  });
  after(() => gateway.stop());

  test('forRoot provides one client, injected by its class, talking to baseUrl with the token', async () => {
    const app = await Test.createTestingModule({
      imports: [BallastModule.forRoot({ baseUrl: gateway.url, token: TOKEN })],
    }).compile();

    const ballast = app.get(BallastClient);
    assert.ok(ballast instanceof client.BallastClient, "the client is @ballast/client's own class");
    assert.equal(app.get(BallastClient), ballast, 'a singleton');
    assert.deepEqual(app.get(BALLAST_OPTIONS), { baseUrl: gateway.url, token: TOKEN });
    assert.ok(app.get(BallastHealthIndicator) instanceof BallastHealthIndicator);

    await ballast.write('sber', 'payments/register', { key: keyFor('order-1', 'pay'), json: { amount: 100 } });
    const [sent] = gateway.seen.slice(-1);
    assert.equal(sent.url, '/call/sber/payments/register');
    assert.equal(sent.headers.authorization, `Bearer ${TOKEN}`);
    assert.equal(sent.headers['idempotency-key'], 'e1febc6a-55bf-585b-bbbb-1a63d108c586');
    await app.close();
  });

  test('forRootAsync takes its options from a factory injecting ConfigService', async () => {
    const app = await Test.createTestingModule({
      imports: [
        BallastModule.forRootAsync({
          imports: [
            ConfigModule.forRoot({
              ignoreEnvFile: true,
              load: [() => ({ BALLAST_GATEWAY_URL: gateway.url, BALLAST_GATEWAY_TOKEN: TOKEN })],
            }),
          ],
          inject: [ConfigService],
          useFactory: async (config) => ({
            baseUrl: config.getOrThrow('BALLAST_GATEWAY_URL'),
            token: config.get('BALLAST_GATEWAY_TOKEN'),
          }),
        }),
      ],
    }).compile();

    await app.get(BallastClient).read('crm', 'customers/7');
    const [sent] = gateway.seen.slice(-1);
    assert.equal(sent.url, '/call/crm/customers/7');
    assert.equal(sent.headers.authorization, `Bearer ${TOKEN}`);
    await app.close();
  });

  test('isGlobal: feature modules inject the client without importing the module', async () => {
    const app = await Test.createTestingModule({
      imports: [BallastModule.forRoot({ baseUrl: gateway.url, isGlobal: true }), PaymentsModule],
    }).compile();
    assert.equal(app.get(Payments).ballast, app.get(BallastClient));
    assert.deepEqual(app.get(BALLAST_OPTIONS), { baseUrl: gateway.url }, 'isGlobal is for the module, not the client');
    await app.close();
  });

  test('forRootAsync takes its options from a class of yours (useClass) or a provider there is (useExisting)', async () => {
    class BallastConfig {
      createBallastOptions() {
        return { baseUrl: gateway.url, token: TOKEN };
      }
    }
    Injectable()(BallastConfig);
    class ConfigHolder {}
    Module({ providers: [BallastConfig], exports: [BallastConfig] })(ConfigHolder);

    for (const async of [
      { useClass: BallastConfig },
      { imports: [ConfigHolder], useExisting: BallastConfig },
    ]) {
      const app = await Test.createTestingModule({
        imports: [BallastModule.forRootAsync({ isGlobal: true, ...async }), PaymentsModule],
      }).compile();
      await app.get(Payments).ballast.read('crm', 'customers/8');
      const [sent] = gateway.seen.slice(-1);
      assert.equal(sent.url, '/call/crm/customers/8');
      assert.equal(sent.headers.authorization, `Bearer ${TOKEN}`);
      assert.deepEqual(app.get(BALLAST_OPTIONS), { baseUrl: gateway.url, token: TOKEN });
      await app.close();
    }
    assert.throws(() => BallastModule.forRootAsync({ isGlobal: true }), /useFactory, useClass or useExisting/);
  });

  test('forFeature: a client bound to one system, injected with @InjectBallast', async () => {
    class SberAdapter {
      constructor(sber, crm, root) {
        Object.assign(this, { sber, crm, root });
      }
    }
    InjectBallast('sber')(SberAdapter, undefined, 0);
    InjectBallast('crm')(SberAdapter, undefined, 1);
    InjectBallast()(SberAdapter, undefined, 2);
    Injectable()(SberAdapter);
    class SberModule {}
    Module({
      imports: [BallastModule.forFeature({ system: 'sber' }), BallastModule.forFeature({ system: 'crm' })],
      providers: [SberAdapter],
    })(SberModule);

    const app = await Test.createTestingModule({
      imports: [BallastModule.forRoot({ baseUrl: gateway.url, token: TOKEN, isGlobal: true }), SberModule],
    }).compile();
    const adapter = app.get(SberAdapter);

    assert.ok(adapter.sber instanceof client.SystemClient);
    assert.equal(adapter.sber.name, 'sber');
    assert.equal(adapter.crm.name, 'crm');
    assert.equal(adapter.root, app.get(BallastClient), '@InjectBallast() is the root client');
    assert.equal(app.get(getBallastToken('sber')), adapter.sber, 'one per system');
    await adapter.sber.write('payments/register', { key: keyFor('order-9', 'pay'), json: {} });
    const [sent] = gateway.seen.slice(-1);
    assert.equal(sent.url, '/call/sber/payments/register');
    assert.equal(sent.headers.authorization, `Bearer ${TOKEN}`, "the root client's options");
    await app.close();
  });

  test('forFeature without a global root client says what it cannot resolve', async () => {
    class Adapter {
      constructor(sber) {
        this.sber = sber;
      }
    }
    InjectBallast('sber')(Adapter, undefined, 0);
    Injectable()(Adapter);
    class Feature {}
    Module({ imports: [BallastModule.forFeature({ system: 'sber' })], providers: [Adapter] })(Feature);

    await assert.rejects(
      Test.createTestingModule({ imports: [BallastModule.forRoot({ baseUrl: gateway.url }), Feature] }).compile(),
      /BallastClient/,
    );
    assert.throws(() => BallastModule.forFeature({}), /name a system/);
  });

  test('not global: a feature module that does not import it cannot resolve the client', async () => {
    await assert.rejects(
      Test.createTestingModule({
        imports: [BallastModule.forRoot({ baseUrl: gateway.url }), PaymentsModule],
      }).compile(),
      /BallastClient/,
    );
  });

  test('a breaker open at the gateway reaches the adapter as SystemUnavailableError with retryAfter', async () => {
    gateway.answer(() => ({
      status: 503,
      headers: {
        'content-type': 'application/problem+json',
        'ballast-problem': 'breaker_open',
        'retry-after': '12',
        'ballast-attempts': '0',
      },
      body: JSON.stringify({
        title: 'Service Unavailable',
        status: 503,
        detail: 'the breaker of sber is open',
        ballast: { reason: 'breaker_open', attempts: 0 },
      }),
    }));
    const app = await Test.createTestingModule({
      imports: [BallastModule.forRoot({ baseUrl: gateway.url })],
    }).compile();

    const error = await app
      .get(BallastClient)
      .read('sber', 'orders/1')
      .then(
        () => assert.fail('expected a rejection'),
        (e) => e,
      );

    assert.ok(error instanceof SystemUnavailableError, String(error));
    assert.equal(SystemUnavailableError, client.SystemUnavailableError, 're-exported, not copied');
    assert.equal(error.system, 'sber');
    assert.equal(error.retryAfter, 12);
    assert.equal(error.reason, 'breaker_open');
    await app.close();
  });
});
