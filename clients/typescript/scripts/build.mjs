// Builds the package in the current directory twice from one source: ES
// modules (dist/esm, tsconfig.json) and CommonJS (dist/cjs,
// tsconfig.cjs.json), each with its declarations. dist/cjs gets a
// package.json of its own saying "commonjs", so Node and TypeScript read the
// files there as CommonJS although the package says "module".

import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';

// The compiler the workspace pins, whichever directory this runs in.
const tsc = join(dirname(createRequire(import.meta.url).resolve('typescript/package.json')), 'bin', 'tsc');
rmSync('dist', { recursive: true, force: true });
for (const project of ['tsconfig.json', 'tsconfig.cjs.json']) {
  execFileSync(process.execPath, [tsc, '-p', project], { stdio: 'inherit' });
}
mkdirSync('dist/cjs', { recursive: true });
writeFileSync('dist/cjs/package.json', '{ "type": "commonjs" }\n');
