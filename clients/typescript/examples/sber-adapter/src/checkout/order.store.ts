import { Injectable } from '@nestjs/common';
import { newKey, type IdempotencyKey } from '@ballast/nestjs';

import type { Confirmation, OrderId, PaymentRef } from '../payment/payment.port.js';

/** What the service keeps about paying one order; a real one keeps it in its database. */
export interface PaymentRecord {
  /** Made at the first "pay" and kept: every later press, attempt and delivery reuses it. */
  paymentKey: IdempotencyKey;
  payment?: PaymentRef;
  /** Whether the receipt went out: `unconfirmed` when no success came back (it is never sent twice). */
  receipt?: 'sent' | 'unconfirmed';
  confirmation?: Confirmation;
}

/** The service's own records of its orders' payments, in memory. */
@Injectable()
export class OrderStore {
  readonly #records = new Map<string, PaymentRecord>();

  /** The order's record, made with a fresh payment key the first time. */
  record(orderId: OrderId): PaymentRecord {
    let record = this.#records.get(orderId.value);
    if (!record) {
      record = { paymentKey: newKey() };
      this.#records.set(orderId.value, record);
    }
    return record;
  }
}
