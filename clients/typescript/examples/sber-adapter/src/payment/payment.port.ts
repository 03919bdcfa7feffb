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
 * A confirmation: done, or deferred to the gateway's durable queue, which
 * delivers it with the same key; `task` follows it.
 */
export type Confirmation = { state: 'confirmed' } | { state: 'deferred'; task: string | null };

/** Where a deferred confirmation stands. */
export type ConfirmationState = 'pending' | 'confirmed' | 'failed';

/** The payment system, as the domain sees it (the guide's `PaymentPort`). */
export interface PaymentPort {
  findOrder(orderId: OrderId): Promise<Order>;
  registerPayment(cmd: RegisterPaymentCommand): Promise<PaymentRef>;
  confirmPayment(orderId: OrderId): Promise<Confirmation>;
  confirmationOf(task: string): Promise<ConfirmationState>;
  sendReceipt(orderId: OrderId): Promise<void>;
}

/** The injection token of the {@link PaymentPort}: an interface is no value to inject by. */
export const PAYMENT_PORT = Symbol('PaymentPort');
