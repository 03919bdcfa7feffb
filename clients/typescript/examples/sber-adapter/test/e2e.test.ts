// The example end to end: the app as main.ts serves it (createApp: Express,
// BallastModule with callbacks, the Sber adapter), listening on the loopback;
// a real `ballast serve` (BALLAST_BIN) that POSTs the ends of deferred writes
// back to it; and a local Sber that loses answers after applying them, resets
// connections, answers 503 and goes down for a while. Two hundred orders are
// paid and confirmed through it. The app never asks how a deferred write went
// and never sends a write again to find out: the gateway's callbacks say.
// `ballast serve` is started by the launcher @ballast/nestjs/testing ships.
//
//   npm run build && BALLAST_BIN=…/target/debug/ballast npm test

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';

import type { NestExpressApplication } from '@nestjs/platform-express';
import { BallastTaskEvents, answerJson, signCallback, type BallastTaskEvent, type Task } from '@ballast/nestjs';

import { createApp } from '../src/app.js';
import type { OrderView } from '../src/checkout/checkout.controller.js';
import { CheckoutService } from '../src/checkout/checkout.service.js';
import type { PaymentRecord } from '../src/checkout/order.store.js';
import { PaymentPortError } from '../src/payment/payment-port.error.js';
import { OrderId, PAYMENT_PORT, type PaymentPort } from '../src/payment/payment.port.js';
import type { SberRegisterResponse } from '../src/sber/sber.mappers.js';
import { startBallastServe, type BallastServe } from '@ballast/nestjs/testing';
import { SberUpstream, type Fault, type Kind } from './sber-upstream.js';

/** How long anything may take before the test says what it waited for. */
const PATIENCE_MS = 20_000;

/** The gateway's token: the variable `[gateway] token_env` names (16 bytes or more). */
const TOKEN = 'sber-adapter-e2e-gateway-token-0123456789';

/** Orders paid while Sber merely misbehaves, and orders paid while it is down. */
const PAID_WHILE_FLAKY = 160;
const PAID_DURING_OUTAGE = 40;

/** What every order costs, in kopecks. */
const AMOUNT = 12_500;

/** The callbacks' secret: `[gateway] callback_secret_env` names it for the gateway, the app reads it too. */
const SECRET = 'sber-adapter-e2e-callback-secret-0123456789';

/**
 * `ballast serve`'s config, test/ballast.toml: Sber's policy as the guide
 * gives it, tightened so the test runs in seconds, and callbacks to the
 * loopback. (This file runs as dist/test/e2e.test.js.)
 */
const CONFIG = new URL('../../test/ballast.toml', import.meta.url);

/** What order `n` of the flaky ones meets, per kind of request. */
function faultsOf(n: number): Partial<Record<Kind, Fault[]>> {
  const nth = (plans: Fault[][]) => plans[n % plans.length]!;
  return {
    // One order in ten loses all three answers: the gateway defers it, and the payment's id comes by callback.
    register: n % 10 === 3 ? ['lost', 'lost', 'lost'] : nth([['lost'], ['reset'], ['503', 'lost'], [], []]),
    confirm: nth([['lost'], ['503'], []]),
    receipt: nth([['lost'], ['503'], ['reset'], [], [], []]),
  };
}

/** A callback as the app's handlers got it, and when. */
interface Received {
  at: number;
  delivery: string;
  type: BallastTaskEvent['type'];
  task: Task;
}

/** A request the app made to the gateway. */
interface GatewayCall {
  method: string;
  path: string;
  key: string | null;
}

describe('the Sber adapter through ballast serve, its deferred writes finished by callbacks', { timeout: 6 * PATIENCE_MS }, () => {
  let upstream: SberUpstream;
  let served: BallastServe;
  let app: NestExpressApplication;
  let appUrl: string;
  let checkout: CheckoutService;
  /** Every callback the app's handlers got, in order. */
  const received: Received[] = [];
  /** Every request the app made to the gateway. */
  const calls: GatewayCall[] = [];
  const realFetch = globalThis.fetch;

  before(async () => {
    upstream = await SberUpstream.start();
    process.env['BALLAST_CALLBACK_SECRET'] = SECRET;
    const port = await freePort();
    served = await startBallastServe(CONFIG, {
      values: { upstream: upstream.port, app: port },
      env: { BALLAST_TEST_GATEWAY_TOKEN: TOKEN, BALLAST_CALLBACK_SECRET: SECRET },
      startupTimeoutMs: PATIENCE_MS,
    });

    // The app's requests to the gateway, counted on their way: the client takes the global fetch when it is made.
    globalThis.fetch = ((input: string | URL | Request, init?: RequestInit) => {
      const url = input instanceof Request ? input.url : String(input);
      if (url.startsWith(served.gateway)) {
        const key = new Headers(init?.headers).get('idempotency-key');
        calls.push({ method: init?.method ?? 'GET', path: new URL(url).pathname, key });
      }
      return realFetch(input, init);
    }) as typeof fetch;

    // The app from the environment, as main.ts starts it.
    process.env['BALLAST_GATEWAY_URL'] = served.gateway;
    process.env['BALLAST_GATEWAY_TOKEN'] = TOKEN;
    process.env['BALLAST_ADMIN_URL'] = served.admin;
    process.env['BALLAST_CALLBACK_URL'] = `http://127.0.0.1:${port}/ballast/callbacks`;
    // Not ready during the outage is what the test expects: no error log for it.
    app = await createApp({ logger: false, abortOnError: false });
    await app.listen(port, '127.0.0.1');
    appUrl = `http://127.0.0.1:${port}`;
    checkout = app.get(CheckoutService);
    app.get(BallastTaskEvents).subscribe(({ delivery, type, task }) => {
      received.push({ at: Date.now(), delivery, type, task });
    });
  });

  after(async () => {
    globalThis.fetch = realFetch;
    await app?.close();
    await served?.stop();
    await upstream?.stop();
  });

  test('no double charge, no poller, no replay: every deferred payment id arrives in its callback', async (t) => {
    const started = Date.now();
    const flaky = range(1, PAID_WHILE_FLAKY).map((n) => `order-${n}`);
    const down = range(PAID_WHILE_FLAKY + 1, PAID_WHILE_FLAKY + PAID_DURING_OUTAGE).map((n) => `order-${n}`);
    const orders = [...flaky, ...down];
    const recordOf = (id: string): PaymentRecord => checkout.recordOf(new OrderId(id))!;
    const registered = (id: string) => recordOf(id)?.payment?.state === 'registered';
    /** The user presses "pay" once: a payment Sber cannot take now is pending, and nobody presses again. */
    const pay = (id: string) => checkout.pay(new OrderId(id), AMOUNT, 'RUB');

    // Sber misbehaves: answers lost after a charge, resets, 503s. Each order is paid, and confirmed if Sber answered.
    for (const [n, id] of flaky.entries()) {
      for (const [kind, faults] of Object.entries(faultsOf(n + 1))) upstream.plan(kind as Kind, id, faults);
    }
    await inBatches(flaky, 4, async (id) => {
      const record = await pay(id);
      if (record.payment?.state === 'registered') await checkout.confirm(new OrderId(id));
    });
    // Deferred: pending still, or registered by a callback that came already.
    const paidLater = flaky.filter((id) => {
      const payment = recordOf(id).payment;
      return payment?.state === 'pending' || (payment?.state === 'registered' && payment.deferred !== undefined);
    });
    assert.ok(paidLater.length >= PAID_WHILE_FLAKY / 10, `${paidLater.length} payments deferred while flaky`);
    await eventually('the deferred payments of the flaky phase are registered, by callback', () =>
      paidLater.every(registered),
    );

    // Sber goes down: the last orders are paid, and the ones paid by callback confirmed. All deferred.
    upstream.outage(true);
    const outageStarted = Date.now();
    const pending = await inBatches(down, 5, async (id) => (await pay(id)).payment);
    for (const payment of pending) assert.equal(payment?.state, 'pending', JSON.stringify(payment));
    const confirmedLater = await inBatches(paidLater, 4, async (id) => (await checkout.confirm(new OrderId(id))).confirmation);
    for (const confirmation of confirmedLater) assert.equal(confirmation?.state, 'pending', JSON.stringify(confirmation));
    const port = app.get<PaymentPort>(PAYMENT_PORT);
    const unavailable = await eventually('findOrder fails fast with system unavailable', async () => {
      const e = await port.findOrder(new OrderId('order-1')).then(
        () => undefined,
        (e: unknown) => e,
      );
      return e instanceof PaymentPortError && e.kind === 'system_unavailable' && e;
    });
    assert.ok(unavailable.retryAfter! >= 1, `Retry-After ${unavailable.retryAfter}`);
    // The app stays ready through the outage: its payments are deferred, Sber is named degraded.
    const degraded = await eventually('GET /health/ready names Sber degraded', async () => {
      const response = await realFetch(`${appUrl}/health/ready`);
      const report = (await response.json()) as HealthReport;
      assert.equal(response.status, 200, `ready through Sber's outage: ${JSON.stringify(report)}`);
      const named = report.info?.['systems']?.['degraded'];
      return Array.isArray(named) && named.includes('sber') && report;
    });
    assert.equal(degraded.info?.['ballast']?.status, 'up', 'the gateway itself stays ready: it defers the payments');
    upstream.outage(false);
    const outageMs = Date.now() - outageStarted;

    // Back up: the gateway's queue delivers every deferred write, and POSTs each end to the app.
    await eventually('every payment deferred during the outage is registered, by callback', () => down.every(registered));
    await inBatches(down, 4, (id) => checkout.confirm(new OrderId(id)));
    await eventually('every order is confirmed', () =>
      orders.every((id) => {
        const state = recordOf(id).confirmation?.state;
        assert.notEqual(state, 'failed', `${id}: ${JSON.stringify(recordOf(id).confirmation)}`);
        return state === 'confirmed';
      }),
    );
    await eventually('GET /health/ready names no system degraded', async () => {
      const response = await realFetch(`${appUrl}/health/ready`);
      const report = (await response.json()) as HealthReport;
      return response.status === 200 && report.info?.['systems']?.['degraded'] === undefined;
    });
    // A receipt the gateway refused unsent (Sber's bulkhead full) failed its callback: sent when the gateway repeats it.
    await eventually('every receipt is out', () =>
      orders.every((id) => ['sent', 'unconfirmed'].includes(recordOf(id).receipt ?? 'not yet')),
    );

    // Charged once: one key per order, one charge per order, whatever the gateway's retries and the queue sent.
    const charges = orders.map((id) => upstream.charges.get(id) ?? 0);
    assert.deepEqual(charges, orders.map(() => 1), 'every order charged exactly once');
    assert.deepEqual(
      orders.map((id) => upstream.keys.get(`register ${id}`)?.size ?? 0),
      orders.map(() => 1),
      'each payment reached Sber under one key',
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

    // No poller, no replay: the app asked nothing about a task and sent each keyed write to the gateway once.
    const taskRequests = calls.filter((c) => c.path.startsWith('/tasks')).length;
    assert.equal(taskRequests, 0, 'the app made no GET /tasks: nothing polls');
    const writes = calls.filter((c) => c.key !== null);
    const perKey = countBy(writes, (c) => `${c.method} ${c.path} ${c.key}`);
    const repeated = [...perKey].filter(([, n]) => n > 1);
    assert.deepEqual(repeated, [], 'each keyed write sent to the gateway once: no replay to learn its outcome');
    assert.equal(
      writes.filter((c) => c.path === '/call/sber/payments/register').length,
      orders.length,
      'one registration per order',
    );

    for (const id of orders) {
      const payment = recordOf(id).payment;
      assert.ok(payment?.state === 'registered', `${id}: ${JSON.stringify(payment)}`);
      assert.equal(payment.paymentId, upstream.paymentIds.get(id), `${id}: the order records the id Sber answered`);
    }

    // Each deferred payment's id came in its callback: Sber's answer to the queue's attempt, kept by the gateway.
    const deferredPayments = orders.filter((id) => {
      const payment = recordOf(id).payment;
      return payment?.state === 'registered' && payment.deferred !== undefined;
    });
    assert.ok(deferredPayments.length >= paidLater.length + down.length, `${deferredPayments.length} payments deferred`);
    const waits: number[] = [];
    for (const id of deferredPayments) {
      const payment = recordOf(id).payment;
      assert.ok(payment?.state === 'registered' && payment.deferred, id);
      assert.equal(payment.via, 'callback', `${id}'s payment id came by callback`);
      const callback = received.find((r) => r.type === 'task.completed' && r.task.task_id === payment.deferred!.task);
      assert.ok(callback, `${id}: a callback for its task ${payment.deferred.task}`);
      const answer = answerJson<SberRegisterResponse>(callback.task);
      assert.equal(callback.task.result?.status, 201, `${id}: Sber's 201 in the callback`);
      assert.equal(answer.paymentId, upstream.paymentIds.get(id), `${id}: the id Sber answered, in the callback`);
      assert.equal(payment.paymentId, answer.paymentId, `${id}: the order records the id its callback carried`);
      waits.push(callback.at - payment.deferred.deferredAt.getTime());
    }
    const confirmationCallbacks = orders.filter((id) => {
      const confirmation = recordOf(id).confirmation;
      return confirmation?.state === 'confirmed' && confirmation.via === 'callback';
    }).length;
    const deliveries = countBy(received, (r) => r.delivery);
    const handledAgain = [...deliveries.values()].filter((n) => n > 1).length;
    const reasons = countBy(deferredPayments, (id) => {
      const payment = recordOf(id).payment;
      return (payment?.state === 'registered' && payment.deferred?.because) || 'unknown';
    });
    const { lost, reset, outage } = upstream.injected;
    const sberRegisterRequests = orders.reduce((sum, id) => {
      const key = [...(upstream.keys.get(`register ${id}`) ?? [])][0];
      return sum + (key ? (upstream.requestsPerKey.get(key) ?? 0) : 0);
    }, 0);
    const receipts = orders.map((id) => recordOf(id).receipt);
    t.diagnostic(
      `e2e: ${orders.length} payments (${flaky.length} while Sber was flaky, ${down.length} during a ` +
        `${(outageMs / 1000).toFixed(1)} s outage); faults injected: ${lost} answers lost after applying, ` +
        `${reset} resets, ${upstream.injected['503']} 503s, ${outage} requests refused while down; ` +
        `${charges.reduce((a, b) => a + b, 0)} charges applied, ${charges.filter((c) => c > 1).length} double charges ` +
        `(Sber saw ${sberRegisterRequests} registration requests for ${orders.length} keys: the gateway's attempts); ` +
        `${deferredPayments.length} payments deferred (${[...reasons].map(([r, n]) => `${n} ${r}`).join(', ')}), ` +
        `${deferredPayments.length}/${deferredPayments.length} payment ids delivered in their callbacks; ` +
        `202 → callback: median ${seconds(median(waits))}, max ${seconds(Math.max(...waits))}; ` +
        `application pollers: 0 (${taskRequests} GET /tasks); replays: ${repeated.length} ` +
        `(${writes.length} keyed writes to the gateway, each key once); ` +
        `${confirmationCallbacks} confirmations deferred and confirmed by callback; ` +
        `${received.length} callbacks handled (${deliveries.size} deliveries, ${handledAgain} handled again after a failure); ` +
        `${orders.length} receipts sent once each (${receipts.filter((r) => r === 'unconfirmed').length} unconfirmed); ` +
        `${((Date.now() - started) / 1000).toFixed(1)} s`,
    );
  });

  test("the app's callback receiver refuses forged and stale signatures, and handles a delivery once", async (t) => {
    const callbacks = `${appUrl}/ballast/callbacks`;
    const post = (body: string, headers: Record<string, string>) =>
      realFetch(callbacks, { method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body });
    const order = async (id: string) => {
      const response = await realFetch(`${appUrl}/orders/${id}`);
      return response.status === 404 ? undefined : ((await response.json()) as OrderView);
    };
    const handled = (delivery: string) => received.filter((r) => r.delivery === delivery).length;
    const now = () => Math.floor(Date.now() / 1000);

    // A callback claiming Sber registered payment-forged for order-forged, as an attacker would send it.
    const forged = callbackBody('task.completed', 'delivery-forged', '9001.forged', 'order-forged', 'payment-forged');
    const headers = { 'ballast-delivery': 'delivery-forged', 'ballast-task': '9001.forged' };
    const refusals: Array<[string, Response]> = [
      ['signed with another secret', await post(forged, { ...headers, 'ballast-signature': signCallback('not-the-gateways-secret-42', forged) })],
      ['unsigned', await post(forged, headers)],
      ['the signature of another body', await post(forged, { ...headers, 'ballast-signature': signCallback(SECRET, `${forged} `) })],
      // The gateway's secret, but made 10 minutes ago: a recorded callback replayed (the tolerance is 300 s).
      ['signed 600 s ago', await post(forged, { ...headers, 'ballast-signature': signCallback(SECRET, forged, now() - 600) })],
      ['signed 600 s ahead', await post(forged, { ...headers, 'ballast-signature': signCallback(SECRET, forged, now() + 600) })],
    ];
    for (const [what, response] of refusals) assert.equal(response.status, 401, `${what}: ${await response.text()}`);
    assert.equal(handled('delivery-forged'), 0, 'no handler saw them');
    assert.equal(await order('order-forged'), undefined, 'no payment recorded for order-forged');
    assert.equal(upstream.receipts.get('order-forged'), undefined, 'no receipt sent for it');

    // A delivery the gateway made during the first test, replayed with a fresh genuine signature and another
    // payment id in its body: a duplicate, answered 204 and handled by nobody.
    const genuine = received.find((r) => r.type === 'task.completed' && answerOf(r.task)?.paymentId !== undefined);
    assert.ok(genuine, 'a payment delivered by callback in the first test');
    const victim = answerOf(genuine.task)!.orderNumber;
    const before = await order(victim);
    const replayed = callbackBody('task.completed', genuine.delivery, genuine.task.task_id, victim, 'payment-replayed');
    const again = await post(replayed, {
      'ballast-delivery': genuine.delivery,
      'ballast-task': genuine.task.task_id,
      'ballast-signature': signCallback(SECRET, replayed),
    });
    assert.equal(again.status, 204, await again.text());
    assert.equal(handled(genuine.delivery), 1, 'the delivery was handled once, by the gateway’s callback');
    assert.deepEqual(await order(victim), before, `${victim} keeps the payment id its genuine callback carried`);

    // A new delivery, genuinely signed, sent twice: handled once — one payment recorded, one receipt sent.
    const fresh = callbackBody('task.completed', 'delivery-twice', '9002.fresh', 'order-twice', 'payment-order-twice-1');
    const signed = { 'ballast-delivery': 'delivery-twice', 'ballast-task': '9002.fresh', 'ballast-signature': signCallback(SECRET, fresh) };
    const first = await post(fresh, signed);
    const second = await post(fresh, signed);
    assert.deepEqual([first.status, second.status], [204, 204]);
    assert.equal(handled('delivery-twice'), 1, 'handled once');
    assert.deepEqual(await order('order-twice'), {
      order: 'order-twice',
      payment: 'registered',
      paymentId: 'payment-order-twice-1',
      receipt: 'sent',
      confirmation: 'none',
    });
    assert.equal(upstream.receipts.get('order-twice'), 1, 'one receipt');

    t.diagnostic(
      `receiver: ${refusals.length} forged or stale callbacks answered 401 (${refusals.map(([w]) => w).join(', ')}), ` +
        `none handled; a genuine delivery replayed and a delivery sent twice answered 204, each handled once`,
    );
  });
});

/** `/health/ready`'s body, as terminus answers it. */
interface HealthReport {
  status: string;
  info?: Record<string, { status: string } & Record<string, unknown>>;
  error?: Record<string, { status: string } & Record<string, unknown>>;
}

/** A callback's body, as the gateway makes it, for a registration of `order` that Sber answered `paymentId`. */
function callbackBody(type: BallastTaskEvent['type'], delivery: string, taskId: string, order: string, paymentId: string): string {
  const answer = JSON.stringify({ paymentId, orderNumber: order });
  const task: Task = {
    task_id: taskId,
    system: 'sber',
    state: 'completed',
    attempts: 1,
    max_attempts: 10,
    last_error: null,
    run_at: Math.floor(Date.now() / 1000),
    next_attempt_at: null,
    deferred_because: 'breaker_open',
    result: {
      status: 201,
      headers: { 'content-type': 'application/json' },
      body: answer,
      body_size: Buffer.byteLength(answer),
      body_kept: true,
    },
  };
  return JSON.stringify({ type, delivery, task });
}

/** The registration answer a task ended with, if it is one. */
function answerOf(task: Task): SberRegisterResponse | undefined {
  try {
    const answer = answerJson<Partial<SberRegisterResponse>>(task);
    return typeof answer.paymentId === 'string' ? (answer as SberRegisterResponse) : undefined;
  } catch {
    return undefined;
  }
}

/** What `check` returns once it is truthy, asked every 50 ms for up to {@link PATIENCE_MS}. */
async function eventually<T>(what: string, check: () => T | false | undefined | Promise<T | false | undefined>): Promise<T> {
  const deadline = Date.now() + PATIENCE_MS;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() > deadline) assert.fail(`timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** A port nothing listens on now, on the loopback: the app's, once it listens. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

/** `count` items of `items` at a time, results in order. */
async function inBatches<T, R>(items: T[], count: number, each: (item: T) => Promise<R>): Promise<R[]> {
  const results: R[] = [];
  for (let i = 0; i < items.length; i += count)
    results.push(...(await Promise.all(items.slice(i, i + count).map(each))));
  return results;
}

function countBy<T>(items: T[], key: (item: T) => string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const item of items) counts.set(key(item), (counts.get(key(item)) ?? 0) + 1);
  return counts;
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(2)} s`;
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
}
