import { Injectable } from '@nestjs/common';
import { IdempotencyKey, newKey } from '@ballast/nestjs';

import type { OrderId } from '../payment/payment.port.js';

/** A write handed to the gateway's queue, waiting for its callback. */
export interface Pending {
  state: 'pending';
  /** The queue's handle, as the 202 gave it: the callback names the same one. */
  task: string | null;
  /** Why the gateway deferred it. */
  because: string | null;
  /** When the 202 came back. */
  deferredAt: Date;
}

/** A write that failed for good: a person looks at it. */
export interface Failed {
  state: 'failed';
  reason: string;
}

/** The payment: registered (with Sber's id), pending in the gateway's queue, or failed. */
export type PaymentState =
  | {
      state: 'registered';
      paymentId: string;
      /** `answer`: Sber answered the request; `callback`: the gateway's callback brought Sber's answer. */
      via: 'answer' | 'callback';
      registeredAt: Date;
      /** For a deferred one: its handle and when the 202 came back. */
      deferred?: { task: string | null; because: string | null; deferredAt: Date };
    }
  | Pending
  | Failed;

/** The confirmation: done, pending in the gateway's queue, or failed. */
export type ConfirmationState =
  | { state: 'confirmed'; via: 'answer' | 'callback'; confirmedAt: Date; deferredAt?: Date }
  | Pending
  | Failed;

/** What the service keeps about paying one order; a real one keeps it in its database. */
export interface PaymentRecord {
  /** Made at the first "pay" and kept: every later press, attempt and delivery reuses it. */
  paymentKey: IdempotencyKey;
  payment?: PaymentState;
  /**
   * Whether the receipt went out: `unconfirmed` when no success came back
   * (it is never sent twice); `sending` while it is on its way.
   */
  receipt?: 'sending' | 'sent' | 'unconfirmed';
  confirmation?: ConfirmationState;
}

/** The service's own records of its orders' payments, in memory. */
@Injectable()
export class OrderStore {
  readonly #records = new Map<string, PaymentRecord>();
  /** The order and the write each pending task handle belongs to. */
  readonly #tasks = new Map<string, { orderId: OrderId; write: 'payment' | 'confirmation' }>();

  /** The order's record, made with a fresh payment key the first time. */
  record(orderId: OrderId): PaymentRecord {
    let record = this.#records.get(orderId.value);
    if (!record) {
      // Stored with the record before anything writes with it: every later press, attempt and delivery finds it.
      IdempotencyKey.store(newKey(), (paymentKey) => this.#records.set(orderId.value, { paymentKey }));
      record = this.#records.get(orderId.value)!;
    }
    return record;
  }

  /** The order's record, if it has one. */
  find(orderId: OrderId): PaymentRecord | undefined {
    return this.#records.get(orderId.value);
  }

  /** Remembers which order's write a deferred task is. */
  track(task: string, orderId: OrderId, write: 'payment' | 'confirmation'): void {
    this.#tasks.set(task, { orderId, write });
  }

  /** The order and write a task handle belongs to. */
  byTask(task: string): { orderId: OrderId; write: 'payment' | 'confirmation' } | undefined {
    return this.#tasks.get(task);
  }
}
