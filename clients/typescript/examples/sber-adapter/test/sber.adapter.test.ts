// The Sber adapter and the checkout without `ballast serve`: BallastTestingModule
// puts SberModule on a fake gateway the test scripts — Sber unavailable, the
// gateway down, a payment deferred and its callback — through the same
// BallastModule.forFeature client and @OnBallastTask handlers the app uses.
//
//   npm run build && node --test dist/test/sber.adapter.test.js

import 'reflect-metadata';

import assert from 'node:assert/strict';
import { afterEach, before, beforeEach, describe, test } from 'node:test';

import { ConfigModule } from '@nestjs/config';
import { Test, type TestingModule } from '@nestjs/testing';
import { keyFor } from '@ballast/nestjs';
import { BallastTestingModule, FakeBallastGateway } from '@ballast/nestjs/testing';

import { CheckoutService } from '../src/checkout/checkout.service.js';
import { PaymentPortError } from '../src/payment/payment-port.error.js';
import { OrderId, PAYMENT_PORT, type PaymentPort } from '../src/payment/payment.port.js';
import { SberModule } from '../src/sber/sber.module.js';

describe('the Sber adapter on a fake gateway', () => {
  let moduleRef: TestingModule;
  let gateway: FakeBallastGateway;
  let port: PaymentPort;
  let checkout: CheckoutService;

  before(() => {
    process.env['BALLAST_CALLBACK_URL'] = 'http://127.0.0.1:3000/ballast/callbacks';
  });

  beforeEach(async () => {
    moduleRef = await Test.createTestingModule({
      imports: [ConfigModule.forRoot({ ignoreEnvFile: true }), BallastTestingModule.forRoot({ isGlobal: true }), SberModule],
    })
      .setLogger({ log() {}, error() {}, warn() {} })
      .compile();
    await moduleRef.init();
    gateway = moduleRef.get(FakeBallastGateway);
    port = moduleRef.get<PaymentPort>(PAYMENT_PORT);
    checkout = moduleRef.get(CheckoutService);
  });

  afterEach(() => moduleRef?.close());

  test('Sber unavailable: system_unavailable, with when to ask again', async () => {
    gateway.on('sber', 'GET orders/*').problem('breaker_open', { retryAfter: 30 });

    const error = await port.findOrder(new OrderId('order-1')).catch((e: unknown) => e);

    assert.ok(error instanceof PaymentPortError, String(error));
    assert.equal(error.kind, 'system_unavailable');
    assert.equal(error.retryAfter, 30);
  });

  test('the gateway down after the write went out: outcome_unknown, to repeat with the same key', async () => {
    gateway.on('sber', 'POST payments/register').unreachable({ sent: true });

    const error = await checkout.pay(new OrderId('order-2'), 12_500, 'RUB').catch((e: unknown) => e);

    assert.ok(error instanceof PaymentPortError, String(error));
    assert.equal(error.kind, 'outcome_unknown');
  });

  test('a payment deferred, then registered by its callback; pressing "pay" again sends nothing new', async () => {
    gateway.on('sber', 'POST payments/register').defer({ because: 'breaker_open' });
    gateway.on('sber', 'POST receipts').reply(201);
    const order = new OrderId('order-3');

    const pending = await checkout.pay(order, 12_500, 'RUB');
    assert.equal(pending.payment?.state, 'pending');
    const again = await checkout.pay(order, 12_500, 'RUB');
    assert.equal(again.payment?.state, 'pending', 'its callback will say');

    const [registration] = gateway.callsTo('sber', 'POST payments/register');
    assert.equal(registration?.key, pending.paymentKey, 'the key stored with the order');
    assert.equal(registration?.callback, process.env['BALLAST_CALLBACK_URL']);
    await gateway.complete(registration!.taskId!, { status: 201, json: { paymentId: 'p-3', orderNumber: 'order-3' } });

    const record = checkout.recordOf(order)!;
    assert.deepEqual(
      [record.payment?.state, record.payment?.state === 'registered' && record.payment.paymentId, record.receipt],
      ['registered', 'p-3', 'sent'],
    );
    assert.equal(gateway.callsTo('sber', 'POST payments/register').length, 1, 'one registration');
    assert.equal(gateway.callsTo('sber', 'POST receipts').length, 1, 'one receipt');
  });

  test('a confirmation is keyed by the order: every attempt and replica sends the same key', async () => {
    gateway.on('sber', 'POST payments/register').reply(201, { paymentId: 'p-4', orderNumber: 'order-4' });
    gateway.on('sber', 'POST receipts').reply(201);
    gateway.on('sber', 'POST orders/order-4/confirm').reply(200, { orderNumber: 'order-4', status: 'CONFIRMED' });
    const order = new OrderId('order-4');

    await checkout.pay(order, 12_500, 'RUB');
    const record = await checkout.confirm(order);

    assert.equal(record.confirmation?.state, 'confirmed');
    assert.equal(gateway.callsTo('sber', 'POST orders/order-4/confirm')[0]?.key, keyFor('order-4', 'confirm-payment'));
  });
});
