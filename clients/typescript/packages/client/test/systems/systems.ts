// With the augmentation `ballast codegen ts` writes (ballast-systems.d.ts
// beside this file, its output for a ballast.toml with `crm` and `sber`),
// a system name is one of them: a misspelt one does not compile. `tsc -p
// test/systems` must pass, so every `@ts-expect-error` below must meet an
// error. Never run.

import { BallastClient, keyFor, type SystemName } from '@ballast/client';

declare const ballast: BallastClient;
const key = keyFor('order-42', 'register-payment');

export async function refused(): Promise<void> {
  // @ts-expect-error -- 'sbr' is not a system of ballast.toml
  await ballast.read('sbr', 'orders/42');
  // @ts-expect-error -- nor on a write
  await ballast.write('sbr', 'payments', { key, json: {} });
  // @ts-expect-error -- nor on a deferrable one
  await ballast.writeOrDefer('Sber', 'payments', { key, json: {} });
  // @ts-expect-error -- nor on one sent once
  await ballast.writeOnce('sms', 'messages', { json: {} });
  // @ts-expect-error -- nor when binding a client to it
  ballast.system('sbr');
  // @ts-expect-error -- a name is one of the systems, not any string
  const name: SystemName = 'sbr';
  void name;
  const { systems } = await ballast.systems();
  // @ts-expect-error -- a health report names the systems too: this comparison can never be true
  if (systems[0]?.system === 'sbr') return;
}

export async function accepted(): Promise<void> {
  await ballast.read('sber', 'orders/42');
  await ballast.write('crm', 'customers', { key, json: {} });
  const sber = ballast.system('sber');
  await sber.writeOrDefer('payments', { key, json: {} });
  const names: SystemName[] = ['crm', 'sber'];
  void names;
}
