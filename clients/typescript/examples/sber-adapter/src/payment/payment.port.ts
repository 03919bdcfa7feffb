import type { IdempotencyKey } from '@ballast/nestjs';

/** An order's id in the domain (the guide's `OrderId`). */
export class OrderId {
  constructor(readonly value: string) {}

  toString(): string {
    return this.value;
  }
}

/** An order as the payment system knows it. */
export interface Order {
  id: OrderId;
  /** In minor units (kopecks). */
  amount: number;
  currency: string;
  status: 'created' | 'registered' | 'confirmed';
}

/** Register a payment for an order, under the key stored with the user's action. */
export interface RegisterPaymentCommand {
  orderId: OrderId;
  amount: number;
  currency: string;
  /** Made once per user action and stored with the order — never per attempt (AUTH-19). */
  idempotencyKey: IdempotencyKey;
}

/** The payment system's reference to a registered payment. */
export interface PaymentRef {
  paymentId: string;
  orderId: OrderId;
}

/**
 * A write the payment system could not finish now, handed to the gateway's
 * durable queue: it is delivered with the same key, and its end comes back
 * as a {@link PaymentEvents} call.
 */
export interface Deferred {
  state: 'deferred';
  /** The queue's handle of the write, `null` only for a task an older gateway stored without one. */
  task: string | null;
  /** Why the gateway deferred it (`attempts_exhausted`, `breaker_open`, …), when it says. */
  because: string | null;
  /** When the queue tries it next, when the gateway can say. */
  nextAttemptAt: Date | null;
}

/** A registration: Sber's payment id at once, or deferred — the id then comes with the callback. */
export type Registration = { state: 'registered'; payment: PaymentRef } | Deferred;

/** A confirmation: done, or deferred — {@link PaymentEvents.paymentConfirmed} follows. */
export type Confirmation = { state: 'confirmed' } | Deferred;

/** The payment system, as the domain sees it (the guide's `PaymentPort`). */
export interface PaymentPort {
  findOrder(orderId: OrderId): Promise<Order>;
  registerPayment(cmd: RegisterPaymentCommand): Promise<Registration>;
  confirmPayment(orderId: OrderId): Promise<Confirmation>;
  sendReceipt(orderId: OrderId): Promise<void>;
}

/**
 * How the payment system's deferred writes end, as the adapter learns it
 * from the gateway's callbacks: what the guide's `OrderConfirmationPoller`
 * found out by asking, told instead. Each may be told more than once (the
 * gateway delivers at least once): an implementation acts once.
 */
export interface PaymentEvents {
  /** A deferred registration went through: Sber's answer named the payment. */
  paymentRegistered(payment: PaymentRef): Promise<void>;
  /** A deferred confirmation went through. */
  paymentConfirmed(orderId: OrderId): Promise<void>;
  /** A deferred write failed for good (a 4xx, or the queue's last attempt): `task` is its handle. */
  deferredWriteFailed(task: string, reason: string): Promise<void>;
}

/** The injection token of the {@link PaymentPort}: an interface is no value to inject by. */
export const PAYMENT_PORT = Symbol('PaymentPort');

/** The injection token of the {@link PaymentEvents}. */
export const PAYMENT_EVENTS = Symbol('PaymentEvents');
