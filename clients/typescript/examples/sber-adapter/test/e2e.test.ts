// The example's adapter end to end: a Nest app built with @nestjs/testing on
// BallastModule, a real `ballast serve` (BALLAST_BIN), and a local Sber that
// loses answers after applying them, resets connections, answers 503 and
// goes down for a while. Fifty orders are paid and confirmed through it.
//
//   npm run build && BALLAST_BIN=…/target/debug/ballast npm test

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';

import { ServiceUnavailableException } from '@nestjs/common';
import { TerminusModule, type HealthCheckResult } from '@nestjs/terminus';
import { Test, type TestingModule } from '@nestjs/testing';
import { BallastModule } from '@ballast/nestjs';

import { AppModule } from '../src/app.module.js';
import { CheckoutService } from '../src/checkout/checkout.service.js';
import { HealthController } from '../src/health.controller.js';
import { PaymentPortError } from '../src/payment/payment-port.error.js';
import { OrderId, PAYMENT_PORT, type PaymentPort } from '../src/payment/payment.port.js';
import { SberModule } from '../src/sber/sber.module.js';
import { PATIENCE_MS, TOKEN, eventually, startBallast, type Served } from 'ballast-ts-test-support';
import { SberUpstream, type Fault, type Kind } from './sber-upstream.js';

/** Orders paid while Sber merely misbehaves, and orders confirmed while it is down. */
const FLAKY_ORDERS = 40;
const OUTAGE_ORDERS = 10;

/**
 * `ballast serve`'s config, test/ballast.toml: Sber's policy as the guide
 * gives it, tightened so the test runs in seconds. (This file runs as
 * dist/test/e2e.test.js.)
 */
const CONFIG = new URL('../../test/ballast.toml', import.meta.url);

/** What order `n` of the flaky ones meets, per kind of request. */
function faultsOf(n: number): Record<Kind, Fault[]> {
  const nth = (plans: Fault[][]) => plans[n % plans.length]!;
  return {
    order: nth([['503'], ['reset'], [], []]),
    // One order in ten loses all three answers: the user presses "pay" again.
    register: n % 10 === 3 ? ['lost', 'lost', 'lost'] : nth([['lost'], ['reset'], ['503', 'lost'], [], []]),
    confirm: nth([['lost'], ['503'], []]),
    receipt: nth([['lost'], ['503'], ['reset'], [], [], []]),
  };
}

describe('the Sber adapter through ballast serve', { timeout: 4 * PATIENCE_MS }, () => {
  let upstream: SberUpstream;
  let served: Served;
  let app: TestingModule;
  let checkout: CheckoutService;

  before(async () => {
    upstream = await SberUpstream.start();
    served = await startBallast(CONFIG, { upstream: upstream.port });
    app = await Test.createTestingModule({
      imports: [
        BallastModule.forRoot({ baseUrl: served.gateway, token: TOKEN, adminUrl: served.admin, global: true }),
        SberModule,
        // Not ready during the outage is what the test expects: no error log for it.
        TerminusModule.forRoot({ logger: false }),
      ],
      controllers: [HealthController],
    }).compile();
    checkout = app.get(CheckoutService);
  });

  after(async () => {
    await app?.close();
    await served?.stop();
    await upstream?.stop();
  });

  test('no double charge, receipts once, every confirmation delivered after the outage', async (t) => {
    const started = Date.now();
    const presses = new Map<string, number>();
    /** The user presses "pay" until it works; told the system is unavailable, they wait as long as it says. */
    const pay = async (id: string) => {
      for (let press = 1; ; press++) {
        presses.set(id, press);
        try {
          return await checkout.pay(new OrderId(id));
        } catch (e) {
          if (!(e instanceof PaymentPortError) || e.kind === 'rejected' || press === 5) throw e;
          if (e.kind === 'system_unavailable') await sleep((e.retryAfter ?? 1) * 1000);
        }
      }
    };
    const flaky = range(1, FLAKY_ORDERS).map((n) => `order-${n}`);
    const down = range(FLAKY_ORDERS + 1, FLAKY_ORDERS + OUTAGE_ORDERS).map((n) => `order-${n}`);

    // Sber misbehaves: answers lost after a charge, resets, 503s.
    for (const [n, id] of flaky.entries()) {
      for (const [kind, faults] of Object.entries(faultsOf(n + 1))) upstream.plan(kind as Kind, id, faults);
    }
    await inBatches(flaky, 4, async (id) => {
      await pay(id);
      await checkout.confirm(new OrderId(id));
    });
    await inBatches(down, 4, pay);

    // Sber goes down while the last orders are confirmed.
    upstream.outage(true);
    const outageStarted = Date.now();
    const deferred = await inBatches(down, 5, async (id) => (await checkout.confirm(new OrderId(id))).confirmation);
    for (const confirmation of deferred) assert.equal(confirmation?.state, 'deferred', JSON.stringify(confirmation));
    const port = app.get<PaymentPort>(PAYMENT_PORT);
    const unavailable = await eventually('findOrder fails fast with system unavailable', async () => {
      const e = await port.findOrder(new OrderId('order-1')).then(
        () => undefined,
        (e: unknown) => e,
      );
      return e instanceof PaymentPortError && e.kind === 'system_unavailable' && e;
    });
    assert.ok(unavailable.retryAfter! >= 1, `Retry-After ${unavailable.retryAfter}`);
    await eventually('readiness says not ready', async () =>
      app
        .get(HealthController)
        .ready()
        .then(
          () => false,
          (e: unknown) => e instanceof ServiceUnavailableException,
        ),
    );
    upstream.outage(false);
    const outageMs = Date.now() - outageStarted;

    // Back up: the gateway's queue delivers every deferred confirmation.
    await eventually('every deferred confirmation is delivered', async () => {
      const states = await Promise.all(down.map((id) => checkout.confirmationOf(new OrderId(id))));
      assert.ok(!states.includes('failed'), states.join());
      return states.every((s) => s === 'confirmed');
    });
    await eventually('readiness says ready', async () => (await app.get(HealthController).ready()).status === 'ok');

    const orders = [...flaky, ...down];
    const charges = orders.map((id) => upstream.charges.get(id) ?? 0);
    const doubles = charges.filter((c) => c > 1).length;
    assert.deepEqual(
      charges,
      orders.map(() => 1),
      'every order charged exactly once',
    );
    assert.deepEqual(
      orders.map((id) => upstream.confirmations.get(id) ?? 0),
      orders.map(() => 1),
      'confirmed exactly once',
    );
    assert.deepEqual(
      orders.map((id) => upstream.receipts.get(id) ?? 0),
      orders.map(() => 1),
      'each receipt sent exactly once (R-RES-RE-X1)',
    );
    for (const id of orders) assert.equal(await checkout.confirmationOf(new OrderId(id)), 'confirmed', id);
    const repressed = [...presses.values()].filter((p) => p > 1).length;
    assert.ok(repressed >= FLAKY_ORDERS / 10, `${repressed} orders paid on a later press`);

    const { lost, reset, outage } = upstream.injected;
    t.diagnostic(
      `e2e: ${orders.length} orders; faults injected: ${lost} answers lost after applying, ${reset} resets, ` +
        `${upstream.injected['503']} 503s, a ${(outageMs / 1000).toFixed(1)} s outage (${outage} requests refused); ` +
        `${charges.reduce((a, b) => a + b, 0)} charges applied, ${doubles} double charges; ` +
        `${orders.length} receipts sent once each; ${repressed} orders paid on a second press; ` +
        `${deferred.length} confirmations deferred, ${deferred.length} completed after the outage; ` +
        `${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  });

  test('the app as AppModule builds it, from the environment, reports ready', async () => {
    process.env['BALLAST_GATEWAY_URL'] = served.gateway;
    process.env['BALLAST_GATEWAY_TOKEN'] = TOKEN;
    process.env['BALLAST_ADMIN_URL'] = served.admin;
    const whole = await Test.createTestingModule({ imports: [AppModule] }).compile();
    try {
      const report = await eventually<HealthCheckResult>('AppModule reports ready', async () =>
        whole
          .get(HealthController)
          .ready()
          .then(
            (r) => r,
            () => false,
          ),
      );
      assert.equal(report.info?.['ballast']?.status, 'up');
      await whole.get(CheckoutService).pay(new OrderId('order-app'));
      assert.equal(upstream.charges.get('order-app'), 1);
    } finally {
      await whole.close();
    }
  });
});

/** `count` items of `items` at a time, results in order. */
async function inBatches<T, R>(items: T[], count: number, each: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += count)
    results.push(...(await Promise.all(items.slice(i, i + count).map(each))));
  return results;
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
