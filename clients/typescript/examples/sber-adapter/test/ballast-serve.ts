// `ballast serve` from BALLAST_BIN, for a test: its own config in a temp dir,
// both listeners on free loopback ports, stopped with the test.

import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';

/** The gateway's token (`[gateway] token_env`): at least 16 bytes. */
export const TOKEN = 'sber-example-token-0123456789';

export interface Served {
  gateway: string;
  admin: string;
  /** The last 64 KiB of its log. */
  log(): string;
  stop(): Promise<void>;
}

/**
 * Starts `ballast serve` on `systems` (TOML) with a SQLite queue polled
 * every 100 ms; resolves once it prints both addresses.
 */
export async function startBallast(systems: string, patienceMs: number): Promise<Served> {
  const bin = process.env['BALLAST_BIN'];
  if (!bin) throw new Error('BALLAST_BIN is not set: point it at the ballast binary (target/debug/ballast)');
  const dir = mkdtempSync(join(tmpdir(), 'ballast-sber-'));
  const config = join(dir, 'ballast.toml');
  writeFileSync(
    config,
    `[queue]
url = "sqlite://${join(dir, 'queue.db')}"
poll_interval = "100ms"

[serve]
listen = "127.0.0.1:0"
stats_interval = "1s"

[gateway]
listen = "127.0.0.1:0"
token_env = "BALLAST_GATEWAY_TOKEN"

${systems}`,
  );
  const child = spawn(bin, ['serve', '--config', config], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, BALLAST_GATEWAY_TOKEN: TOKEN },
  });
  let log = '';
  child.stderr.setEncoding('utf8').on('data', (text: string) => {
    log = (log + text).slice(-64 * 1024);
  });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGKILL');
      await exited;
    }
    rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', () => child.kill('SIGKILL'));

  const found: { gateway?: string; admin?: string } = {};
  await new Promise<void>((resolve, reject) => {
    const fail = (why: string) => {
      clearTimeout(timer);
      reject(new Error(`ballast serve did not start: ${why}\n--- its log:\n${log}`));
    };
    const timer = setTimeout(() => fail(`no addresses within ${patienceMs} ms`), patienceMs);
    child.once('error', (e) => fail(`${bin}: ${e.message}`));
    child.once('exit', (code, signal) => fail(`it exited (${signal ?? code})`));
    createInterface({ input: child.stdout }).on('line', (line) => {
      found.admin ??= /^ballast serve: listening on (http:\/\/\S+)/.exec(line)?.[1];
      found.gateway ??= /^ballast serve: gateway on (http:\/\/\S+)/.exec(line)?.[1];
      if (found.admin && found.gateway) {
        clearTimeout(timer);
        resolve();
      }
    });
  });
  return { gateway: found.gateway!, admin: found.admin!, log: () => log, stop };
}
