import {
  BadRequestException,
  Body,
  Controller,
  Get,
  HttpCode,
  NotFoundException,
  Param,
  Post,
  Res,
  ServiceUnavailableException,
} from '@nestjs/common';

import { PaymentPortError } from '../payment/payment-port.error.js';
import { OrderId } from '../payment/payment.port.js';
import { CheckoutService } from './checkout.service.js';
import type { PaymentRecord } from './order.store.js';

/** What `res.status(…)` needs of the platform's response (Express's, here). */
interface StatusResponse {
  status(code: number): unknown;
}

/**
 * The shop's checkout over HTTP: "pay" answers 200 with Sber's payment id,
 * or 202 when the gateway deferred the payment — the id follows by callback,
 * and `GET /orders/{id}` shows it once it came.
 */
@Controller('orders')
export class CheckoutController {
  constructor(private readonly checkout: CheckoutService) {}

  @Post(':id/pay')
  @HttpCode(200)
  async pay(
    @Param('id') id: string,
    @Body() body: { amount?: unknown; currency?: unknown } | undefined,
    @Res({ passthrough: true }) res: StatusResponse,
  ): Promise<OrderView> {
    const { amount, currency } = body ?? {};
    if (!Number.isSafeInteger(amount) || (amount as number) <= 0 || typeof currency !== 'string') {
      throw new BadRequestException('{ "amount": minor units, "currency": "RUB" }');
    }
    const record = await this.#domain(() => this.checkout.pay(new OrderId(id), amount as number, currency));
    if (record.payment?.state === 'pending') res.status(202);
    return view(id, record);
  }

  @Post(':id/confirm')
  @HttpCode(200)
  async confirm(@Param('id') id: string, @Res({ passthrough: true }) res: StatusResponse): Promise<OrderView> {
    const record = await this.#domain(() => this.checkout.confirm(new OrderId(id)));
    if (record.confirmation?.state === 'pending') res.status(202);
    return view(id, record);
  }

  @Get(':id')
  order(@Param('id') id: string): OrderView {
    const record = this.checkout.recordOf(new OrderId(id));
    if (!record) throw new NotFoundException(`no order ${id} was paid here`);
    return view(id, record);
  }

  async #domain(call: () => Promise<PaymentRecord>): Promise<PaymentRecord> {
    try {
      return await call();
    } catch (e) {
      if (e instanceof PaymentPortError && e.kind === 'system_unavailable') {
        throw new ServiceUnavailableException(e.message);
      }
      throw e;
    }
  }
}

/** An order's payment as the shop's API shows it. */
export interface OrderView {
  order: string;
  payment: 'registered' | 'pending' | 'failed' | 'none';
  paymentId?: string;
  receipt?: string;
  confirmation: 'confirmed' | 'pending' | 'failed' | 'none';
}

function view(order: string, record: PaymentRecord): OrderView {
  return {
    order,
    payment: record.payment?.state ?? 'none',
    ...(record.payment?.state === 'registered' && { paymentId: record.payment.paymentId }),
    ...(record.receipt && { receipt: record.receipt }),
    confirmation: record.confirmation?.state ?? 'none',
  };
}
