// The shop's checkout, served: pay and confirm orders over HTTP, and receive
// the gateway's callbacks for the payments and confirmations it deferred.
//
//   BALLAST_GATEWAY_TOKEN=… BALLAST_CALLBACK_SECRET=… \
//   BALLAST_CALLBACK_URL=http://127.0.0.1:3000/ballast/callbacks node dist/src/main.js
//
//   curl -X POST localhost:3000/orders/order-1/pay -H 'content-type: application/json' \
//        -d '{"amount":12500,"currency":"RUB"}'      # 200 with the payment id, or 202: it follows by callback
//   curl localhost:3000/orders/order-1               # the payment id once it came

import 'reflect-metadata';

import { createApp } from './app.js';

const app = await createApp({ logger: ['log', 'error', 'warn'] });
app.enableShutdownHooks();
await app.listen(Number(process.env['PORT'] ?? 3000), process.env['HOST'] ?? '127.0.0.1');
console.log(`checkout on ${await app.getUrl()}; callbacks at POST /ballast/callbacks`);
