import type { NestApplicationOptions } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';

import { AppModule } from './app.module.js';

/**
 * The app on Express, as `main.ts` serves it and the end-to-end test runs
 * it:
 *
 * - the request bodies' bytes kept (`rawBody`): the callbacks' signatures
 *   are over them;
 * - a JSON limit a callback fits in: it carries Sber's answer, up to
 *   `[queue] keep_answer` (64 KiB) escaped in JSON — more than Express's
 *   default 100 KB may take, and a 413 would fail the callback for good;
 * - connections closed on shutdown (`forceCloseConnections`): the gateway
 *   keeps its callback connections open in a pool, some never used, and
 *   `close()` would wait for it to drop them — minutes. A callback cut
 *   midway is one the gateway sends again.
 */
export async function createApp(options: NestApplicationOptions = {}): Promise<NestExpressApplication> {
  const app = await NestFactory.create<NestExpressApplication>(AppModule, {
    forceCloseConnections: true,
    ...options,
    rawBody: true,
  });
  app.useBodyParser('json', { limit: '1mb' });
  return app;
}
