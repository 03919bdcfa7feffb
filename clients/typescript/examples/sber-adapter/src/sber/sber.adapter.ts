import { Injectable } from '@nestjs/common';
import { BallastClient, SystemUnavailableError, keyFor } from '@ballast/nestjs';

import { PaymentPortError } from '../payment/payment-port.error.js';
import type {
  Confirmation,
  ConfirmationState,
  Order,
  OrderId,
  PaymentPort,
  PaymentRef,
  RegisterPaymentCommand,
} from '../payment/payment.port.js';
import {
  toApiRequest,
  toOrderDomain,
  toPaymentRef,
  type SberOrderDto,
  type SberRegisterResponse,
} from './sber.mappers.js';

/**
 * The guide's `SberAdapter`, its policy moved out: retry → breaker →
 * bulkhead → timeout for Sber is `[systems.sber]` in `ballast.toml`, applied
 * by the gateway to every attempt, and `ballast lint` checks it. The adapter
 * keeps its port, its mappers and its error mapping.
 */
@Injectable()
export class SberAdapter implements PaymentPort {
  constructor(private readonly ballast: BallastClient) {}

  async findOrder(orderId: OrderId): Promise<Order> {                // read → the gateway retries it (R-RES-RE-1)
    try {
      const resp = await this.ballast.read('sber', `orders/${orderId.value}`);
      if (!resp.ok) throw PaymentPortError.fromStatus('sber', resp.status);  // Sber's own answer, after the retries
      return toOrderDomain((await resp.json()) as SberOrderDto);       // mapper DTO → domain (R-RES-OAS-4)
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }

  async registerPayment(cmd: RegisterPaymentCommand): Promise<PaymentRef> {  // write + key → retried with that key
    try {
      const resp = await this.ballast.write('sber', 'payments/register', {
        key: cmd.idempotencyKey,                                     // ← required by the type (AUTH-19)
        json: toApiRequest(cmd),
      });
      if (!resp.ok) throw PaymentPortError.fromStatus('sber', resp.status);
      return toPaymentRef((await resp.json()) as SberRegisterResponse);
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }

  async confirmPayment(orderId: OrderId): Promise<Confirmation> {  // write + key → retried, then queued (R-RES-RE-5)
    try {
      const out = await this.ballast.writeOrDefer('sber', `orders/${orderId.value}/confirm`, {
        // Derived, not random: every attempt, every instance and the queue send the same key.
        key: keyFor(orderId.value, 'confirm-payment'),
        json: {},
      });
      if (out.deferred) return { state: 'deferred', task: out.taskId };  // no order_confirmation_task, no poller
      if (!out.response.ok) throw PaymentPortError.fromStatus('sber', out.response.status);
      return { state: 'confirmed' };
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }

  async confirmationOf(task: string): Promise<ConfirmationState> {  // the queue's word on a deferred confirmation
    try {
      const { state } = await this.ballast.task(task);
      if (state === 'completed') return 'confirmed';                // a 4xx fails the task instead
      return state === 'failed' || state === 'cancelled' ? 'failed' : 'pending';
    } catch (e) {
      throw PaymentPortError.from(e);
    }
  }

  async sendReceipt(orderId: OrderId): Promise<void> {             // write, no key: sent exactly once (R-RES-RE-X1)
    try {
      const resp = await this.ballast.writeOnce('sber', 'receipts', { json: { orderNumber: orderId.value } });
      if (!resp.ok) throw PaymentPortError.fromStatus('sber', resp.status);
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }
}
