import { Inject, Injectable } from '@nestjs/common';

import {
  PAYMENT_PORT,
  type ConfirmationState,
  type OrderId,
  type PaymentPort,
  type PaymentRef,
} from '../payment/payment.port.js';
import { OrderStore, type PaymentRecord } from './order.store.js';

/** The domain's use of the {@link PaymentPort}: pay an order, confirm it, follow a deferred confirmation. */
@Injectable()
export class CheckoutService {
  constructor(
    @Inject(PAYMENT_PORT) private readonly payments: PaymentPort,
    private readonly orders: OrderStore,
  ) {}

  /**
   * The user pressed "pay": register the payment under the order's stored
   * key, then send the receipt once. Pressed again after a failure, it
   * registers with the same key, so Sber charges once.
   */
  async pay(orderId: OrderId): Promise<PaymentRef> {
    const record = this.orders.record(orderId);
    if (record.payment) return record.payment;
    const order = await this.payments.findOrder(orderId);
    const payment = await this.payments.registerPayment({
      orderId,
      amount: order.amount,
      currency: order.currency,
      idempotencyKey: record.paymentKey,
    });
    record.payment = payment;
    record.receipt = await this.#receipt(orderId);
    return payment;
  }

  /** Confirm the payment: at once, or deferred to the gateway's queue, which keeps trying. */
  async confirm(orderId: OrderId): Promise<PaymentRecord> {
    const record = this.orders.record(orderId);
    if (!record.payment) throw new Error(`order ${orderId} has no payment to confirm`);
    record.confirmation ??= await this.payments.confirmPayment(orderId);
    return record;
  }

  /** Where the order's confirmation stands. */
  async confirmationOf(orderId: OrderId): Promise<ConfirmationState> {
    const confirmation = this.orders.record(orderId).confirmation;
    if (!confirmation) return 'pending';
    if (confirmation.state === 'confirmed') return 'confirmed';
    // Without a handle (a task an older gateway stored) the queue still delivers it; there is only nothing to ask.
    if (confirmation.task === null) return 'pending';
    const state = await this.payments.confirmationOf(confirmation.task);
    if (state === 'confirmed') this.orders.record(orderId).confirmation = { state: 'confirmed' };
    return state;
  }

  /**
   * The receipt has no key: one attempt, and no second one when it fails —
   * its answer may be what was lost (R-RES-RE-X1). A person looks at those.
   */
  async #receipt(orderId: OrderId): Promise<PaymentRecord['receipt']> {
    try {
      await this.payments.sendReceipt(orderId);
      return 'sent';
    } catch {
      return 'unconfirmed';
    }
  }
}
