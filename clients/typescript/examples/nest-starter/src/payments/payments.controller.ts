import { Body, Controller, Param, Post } from '@nestjs/common';
import { keyFor } from '@ballast/nestjs';
import { SberAdapter } from './sber.adapter';

@Controller('orders')
export class PaymentsController {
  constructor(private readonly sber: SberAdapter) {}

  @Post(':id/pay')
  pay(@Param('id') id: string, @Body() body: { amount: number; currency: string }) {
    // One key per order and operation, the same on every attempt and every replica: nothing to store.
    const idempotencyKey = keyFor(id, 'register-payment');
    return this.sber.registerPayment({ orderId: id, ...body, idempotencyKey });
  }
}
