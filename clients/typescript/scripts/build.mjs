// Builds the package in the current directory: one implementation, in
// CommonJS (dist/cjs, tsconfig.cjs.json, with its declarations), and for
// each entry point of the `exports` map an ES module wrapper in dist/esm
// that re-exports it.
//
// One implementation, so one class identity: `import` and `require` of the
// package give the same `BallastClient`, the same `BallastError`, the same
// Nest injection tokens, whichever module system an application, a library
// or a test runner loads it with (Node's "dual package hazard"). The
// wrappers' declarations re-export the CommonJS ones, so the types are one
// set too, and a module augmentation of the package (`ballast codegen ts`)
// reaches both.
//
// The sources are type-checked as ES modules first (tsconfig.json, no
// emit): their imports stay valid for `nodenext` resolution.

import { execFileSync } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, posix, resolve } from 'node:path';

const require = createRequire(import.meta.url);
// The compiler the workspace pins, whichever directory this runs in.
const tsc = join(dirname(require.resolve('typescript/package.json')), 'bin', 'tsc');
const compile = (...args) => {
  try {
    execFileSync(process.execPath, [tsc, ...args], { stdio: 'inherit' });
  } catch (error) {
    // tsc printed why; its stack trace here would only bury it.
    process.exit(error.status ?? 1);
  }
};

rmSync('dist', { recursive: true, force: true });
compile('-p', 'tsconfig.json', '--noEmit');
compile('-p', 'tsconfig.cjs.json');
mkdirSync('dist/cjs', { recursive: true });
writeFileSync('dist/cjs/package.json', '{ "type": "commonjs" }\n');

const header =
  '// The ES module entry: the CommonJS implementation re-exported, so that\n' +
  '// `import` and `require` give the same classes (see the package README).\n';
for (const entry of Object.values(JSON.parse(readFileSync('package.json', 'utf8')).exports)) {
  const esm = entry?.import?.default;
  if (typeof esm !== 'string') continue;
  const cjs = entry.require.default;
  const target = posix.relative(posix.dirname(esm), cjs);
  // Named one by one, from what the CommonJS module exports: an export Node
  // cannot find in it fails the import at once instead of being undefined.
  const names = Object.keys(require(resolve(cjs))).sort();
  mkdirSync(dirname(esm), { recursive: true });
  writeFileSync(esm, `${header}export {\n${names.map((name) => `  ${name},\n`).join('')}} from '${target}';\n`);
  writeFileSync(entry.import.types, `${header}export * from '${target}';\n`);
}
