import { Injectable } from '@nestjs/common';
import { ConfigService } from '@nestjs/config';
import { InjectBallast, SystemUnavailableError, keyFor, type Handover, type SystemClient } from '@ballast/nestjs';

import { PaymentPortError } from '../payment/payment-port.error.js';
import type {
  Confirmation,
  Deferred,
  Order,
  OrderId,
  PaymentPort,
  Registration,
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
 * keeps its port, its mappers and its error mapping, and a client bound to
 * Sber (`@InjectBallast('sber')`): it cannot call another system, and
 * `'sbr'` would not compile (`src/ballast-systems.d.ts`, from `ballast
 * codegen ts`). A write the gateway defers names the app's callback URL
 * (`BALLAST_CALLBACK_URL`): how it ends comes back to {@link SberCallbacks},
 * and nothing here asks.
 */
@Injectable()
export class SberAdapter implements PaymentPort {
  /** Where the gateway POSTs the end of a deferred write: this app's callback controller. */
  readonly #callback: string;

  constructor(
    @InjectBallast('sber') private readonly sber: SystemClient<'sber'>,
    config: ConfigService,
  ) {
    this.#callback = config.getOrThrow<string>('BALLAST_CALLBACK_URL');
  }

  async findOrder(orderId: OrderId): Promise<Order> {                // read → the gateway retries it (R-RES-RE-1)
    try {
      const resp = await this.sber.read(`orders/${orderId.value}`);
      if (!resp.ok) throw PaymentPortError.fromStatus('sber', resp.status);  // Sber's own answer, after the retries
      return toOrderDomain((await resp.json()) as SberOrderDto);       // mapper DTO → domain (R-RES-OAS-4)
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }

  async registerPayment(cmd: RegisterPaymentCommand): Promise<Registration> {  // write + key → retried, then queued
    try {
      const out = await this.sber.writeOrDefer('payments/register', {
        key: cmd.idempotencyKey,                                     // ← required by the type (AUTH-19)
        json: toApiRequest(cmd),
        callback: this.#callback,                                    // the payment's id comes back here if deferred
      });
      if (out.deferred) return deferred(out);                         // charged once, whenever Sber takes it
      if (!out.response.ok) throw PaymentPortError.fromStatus('sber', out.response.status);
      return { state: 'registered', payment: toPaymentRef((await out.response.json()) as SberRegisterResponse) };
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }

  async confirmPayment(orderId: OrderId): Promise<Confirmation> {  // write + key → retried, then queued (R-RES-RE-5)
    try {
      const out = await this.sber.writeOrDefer(`orders/${orderId.value}/confirm`, {
        // Derived, not random: every attempt, every instance and the queue send the same key.
        key: keyFor(orderId.value, 'confirm-payment'),
        json: {},
        callback: this.#callback,                                    // no order_confirmation_task, no poller
      });
      if (out.deferred) return deferred(out);
      if (!out.response.ok) throw PaymentPortError.fromStatus('sber', out.response.status);
      return { state: 'confirmed' };
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }

  async sendReceipt(orderId: OrderId): Promise<void> {             // write, no key: sent exactly once (R-RES-RE-X1)
    try {
      const resp = await this.sber.writeOnce('receipts', { json: { orderNumber: orderId.value } });
      if (!resp.ok) throw PaymentPortError.fromStatus('sber', resp.status);
    } catch (e) {
      if (e instanceof SystemUnavailableError) throw PaymentPortError.systemUnavailable('sber', e);
      throw PaymentPortError.from(e);
    }
  }
}

/** The gateway's hand-over (its 202), in the domain's words. */
function deferred(out: Extract<Handover, { deferred: true }>): Deferred {
  return { state: 'deferred', task: out.taskId, because: out.deferredBecause, nextAttemptAt: out.nextAttemptAt };
}
