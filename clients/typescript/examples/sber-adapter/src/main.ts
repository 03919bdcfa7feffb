// Pays and confirms the orders named on the command line through the
// gateway, and says where each stands:
//
//   BALLAST_GATEWAY_TOKEN=… node dist/src/main.js order-1 order-2

import 'reflect-metadata';

import { NestFactory } from '@nestjs/core';

import { AppModule } from './app.module.js';
import { CheckoutService } from './checkout/checkout.service.js';
import { OrderId } from './payment/payment.port.js';

const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error', 'warn'] });
const checkout = app.get(CheckoutService);
for (const id of process.argv.slice(2)) {
  const orderId = new OrderId(id);
  try {
    const payment = await checkout.pay(orderId);
    const { confirmation, receipt } = await checkout.confirm(orderId);
    console.log(`${id}: payment ${payment.paymentId}, confirmation ${confirmation?.state}, receipt ${receipt}`);
  } catch (e) {
    console.log(`${id}: ${e instanceof Error ? e.message : String(e)}`);
  }
}
await app.close();
