// Sber's wire format and the domain's, kept apart at the adapter (R-RES-OAS-4).

import { OrderId, type Order, type PaymentRef, type RegisterPaymentCommand } from '../payment/payment.port.js';

/** `GET /orders/{orderNumber}`. */
export interface SberOrderDto {
  orderNumber: string;
  amount: number;
  currency: string;
  status: 'CREATED' | 'REGISTERED' | 'CONFIRMED';
}

/** The body of `POST /payments/register`. */
export interface SberRegisterRequest {
  orderNumber: string;
  amount: number;
  currency: string;
}

/** Its answer (201), at once or in the callback of a deferred registration. */
export interface SberRegisterResponse {
  paymentId: string;
  orderNumber: string;
}

/** The answer to `POST /orders/{orderNumber}/confirm` (200). */
export interface SberConfirmResponse {
  orderNumber: string;
  status: 'CONFIRMED';
}

export function toOrderDomain(dto: SberOrderDto): Order {
  const status = ({ CREATED: 'created', REGISTERED: 'registered', CONFIRMED: 'confirmed' } as const)[dto.status];
  return { id: new OrderId(dto.orderNumber), amount: dto.amount, currency: dto.currency, status };
}

export function toApiRequest(cmd: RegisterPaymentCommand): SberRegisterRequest {
  return { orderNumber: cmd.orderId.value, amount: cmd.amount, currency: cmd.currency };
}

export function toPaymentRef(dto: SberRegisterResponse): PaymentRef {
  return { paymentId: dto.paymentId, orderId: new OrderId(dto.orderNumber) };
}

/**
 * What the answer that completed a deferred write says, in the domain's
 * words: a registration names the payment, a confirmation the order.
 */
export function toCompletion(
  dto: SberRegisterResponse | SberConfirmResponse,
): { kind: 'registered'; payment: PaymentRef } | { kind: 'confirmed'; orderId: OrderId } {
  if ('paymentId' in dto) return { kind: 'registered', payment: toPaymentRef(dto) };
  return { kind: 'confirmed', orderId: new OrderId(dto.orderNumber) };
}
