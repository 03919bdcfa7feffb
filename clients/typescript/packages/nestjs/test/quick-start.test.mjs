// The README's quick start is the Nest starter project CI compiles: every
// file the README shows under its path (`src/app.module.ts`:, …) is that
// file of examples/nest-starter, byte for byte, so what the README tells a
// team to write is what was compiled on the project `nest new` makes.

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';

const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
const starter = new URL('../../../examples/nest-starter/', import.meta.url);

test("the quick start's files are the Nest starter's", () => {
  const shown = [...readme.matchAll(/^`([\w./-]+\.(?:ts|json))`(?:, then)?:\n\n```(?:ts|jsonc)\n([\s\S]*?)```$/gm)];
  assert.deepEqual(
    shown.map(([, path]) => path).sort(),
    [
      'src/app.module.ts',
      'src/ballast-systems.d.ts',
      'src/payments/payments.controller.ts',
      'src/payments/payments.module.ts',
      'src/payments/sber.adapter.ts',
      'tsconfig.json',
    ],
  );
  for (const [, path, text] of shown) {
    assert.equal(text, readFileSync(new URL(path, starter), 'utf8'), `README.md's ${path} is examples/nest-starter/${path}`);
  }
});
