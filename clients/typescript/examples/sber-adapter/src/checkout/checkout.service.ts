import { Inject, Injectable } from '@nestjs/common';

import { PaymentPortError } from '../payment/payment-port.error.js';
import {
  PAYMENT_PORT,
  type OrderId,
  type PaymentEvents,
  type PaymentPort,
  type PaymentRef,
} from '../payment/payment.port.js';
import { OrderStore, type PaymentRecord } from './order.store.js';

/**
 * The domain's use of the {@link PaymentPort}: pay an order, confirm it —
 * at once, or deferred to the gateway's queue — and the {@link PaymentEvents}
 * that finish a deferred one when its callback comes. Nothing here polls:
 * no `@Interval`, no asking the gateway, no sending a write again to learn
 * how it went.
 */
@Injectable()
export class CheckoutService implements PaymentEvents {
  constructor(
    @Inject(PAYMENT_PORT) private readonly payments: PaymentPort,
    private readonly orders: OrderStore,
  ) {}

  /**
   * The user pressed "pay": register the payment under the order's stored
   * key, then send the receipt once. If Sber cannot take it now, the
   * gateway's queue does, with the same key, and the payment's id comes
   * with the callback: the user is told it is pending, and nothing is sent
   * again. Pressed again, it registers nothing twice.
   */
  async pay(orderId: OrderId, amount: number, currency: string): Promise<PaymentRecord> {
    const record = this.orders.record(orderId);
    if (record.payment?.state === 'registered') {
      await this.#receipt(orderId, record); // one refused unsent before is sent now
      return record;
    }
    if (record.payment?.state === 'pending') return record; // its callback will say
    const registration = await this.payments.registerPayment({
      orderId,
      amount,
      currency,
      idempotencyKey: record.paymentKey,
    });
    if (registration.state === 'registered') {
      await this.#registered(record, registration.payment, 'answer');
    } else if (stateNow(record.payment) !== 'registered') {
      // Its callback could come before this line runs: then the payment is registered already.
      const { task, because } = registration;
      record.payment = { state: 'pending', task, because, deferredAt: new Date() };
      if (task) this.orders.track(task, orderId, 'payment');
    }
    return record;
  }

  /** Confirm the registered payment: at once, or deferred to the gateway's queue, which keeps trying. */
  async confirm(orderId: OrderId): Promise<PaymentRecord> {
    const record = this.orders.record(orderId);
    if (record.payment?.state !== 'registered') throw new Error(`order ${orderId} has no registered payment to confirm`);
    if (record.confirmation && record.confirmation.state !== 'failed') return record;
    const confirmation = await this.payments.confirmPayment(orderId);
    if (confirmation.state === 'confirmed') {
      record.confirmation = { state: 'confirmed', via: 'answer', confirmedAt: new Date() };
    } else if (stateNow(record.confirmation) !== 'confirmed') {
      const { task, because } = confirmation;
      record.confirmation = { state: 'pending', task, because, deferredAt: new Date() };
      if (task) this.orders.track(task, orderId, 'confirmation');
    }
    return record;
  }

  /** The order's record, if it was paid. */
  recordOf(orderId: OrderId): PaymentRecord | undefined {
    return this.orders.find(orderId);
  }

  // ---- PaymentEvents: the callbacks of the gateway, through the adapter ----

  async paymentRegistered(payment: PaymentRef): Promise<void> {
    await this.#registered(this.orders.record(payment.orderId), payment, 'callback');
  }

  async paymentConfirmed(orderId: OrderId): Promise<void> {
    const record = this.orders.record(orderId);
    if (record.confirmation?.state === 'confirmed') return; // told again
    const deferredAt = record.confirmation?.state === 'pending' ? record.confirmation.deferredAt : undefined;
    record.confirmation = { state: 'confirmed', via: 'callback', confirmedAt: new Date(), ...(deferredAt && { deferredAt }) };
  }

  async deferredWriteFailed(task: string, reason: string): Promise<void> {
    const owner = this.orders.byTask(task);
    if (!owner) return; // not a write of this service's orders
    const record = this.orders.record(owner.orderId);
    if (owner.write === 'payment' && record.payment?.state === 'pending') record.payment = { state: 'failed', reason };
    if (owner.write === 'confirmation' && record.confirmation?.state === 'pending') {
      record.confirmation = { state: 'failed', reason };
    }
  }

  /** The payment is Sber's: record its id (once), then send the receipt. */
  async #registered(record: PaymentRecord, payment: PaymentRef, via: 'answer' | 'callback'): Promise<void> {
    if (record.payment?.state !== 'registered') {
      const was = record.payment?.state === 'pending' ? record.payment : undefined;
      record.payment = {
        state: 'registered',
        paymentId: payment.paymentId,
        via,
        registeredAt: new Date(),
        ...(was && { deferred: { task: was.task, because: was.because, deferredAt: was.deferredAt } }),
      };
    }
    await this.#receipt(payment.orderId, record);
  }

  /**
   * The receipt has no key: one attempt, and no second one when it fails —
   * its answer may be what was lost (R-RES-RE-X1); a person looks at those.
   * Only a receipt the gateway refused unsent (Sber unavailable: its breaker
   * open, its bulkhead full) is sent again: the error goes up — to the user
   * who pressed "pay", or as a 500 to the callback, which the gateway sends
   * again — and the next time sends it.
   */
  async #receipt(orderId: OrderId, record: PaymentRecord): Promise<void> {
    if (record.receipt !== undefined) return;
    record.receipt = 'sending';
    try {
      await this.payments.sendReceipt(orderId);
      record.receipt = 'sent';
    } catch (e) {
      if (e instanceof PaymentPortError && e.kind === 'system_unavailable') {
        delete record.receipt; // nothing was sent
        throw e;
      }
      record.receipt = 'unconfirmed';
    }
  }
}

/**
 * The state of what `record` holds now: after an `await`, the callback may
 * have changed it (TypeScript's narrowing does not know).
 */
function stateNow(held: { state: string } | undefined): string | undefined {
  return held?.state;
}
