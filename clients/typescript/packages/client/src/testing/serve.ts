/**
 * A real `ballast serve` for an end-to-end suite: started on a config file
 * of the test's, on ports the OS picks, with its queue in a temp dir, and
 * stopped with the test (at the latest when the process exits).
 */

import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

/** What {@link startBallastServe} takes besides the config. */
export interface BallastServeOptions {
  /**
   * The `ballast` binary (default: the `BALLAST_BIN` environment variable,
   * else `ballast` on the `PATH`).
   */
  bin?: string;
  /**
   * Values for the config's `{name}` placeholders — the upstream's port,
   * say. `{dir}` is always the run's temp dir, for `sqlite://{dir}/queue.db`.
   */
  values?: Record<string, string | number>;
  /**
   * Environment variables for the process, over this process's own: the
   * variables `[gateway] token_env` and `callback_secret_env` name.
   */
  env?: Record<string, string>;
  /** How long it may take to print its addresses, in ms (default 20 000). */
  startupTimeoutMs?: number;
}

/** A running `ballast serve`. */
export interface BallastServe {
  /** The gateway's address, `http://127.0.0.1:<port>`: a client's `baseUrl`. */
  gateway: string;
  /** The admin listener's address (`/health/*`, `/metrics`): a client's `adminUrl`. */
  admin: string;
  /** The temp dir it runs in (its queue database, the config it was given). */
  dir: string;
  /** What it has printed on stderr lately (its last 64 KiB). */
  stderr(): string;
  /** Kills it and removes its temp dir. */
  stop(): Promise<void>;
}

/**
 * Starts `ballast serve` on `config` and resolves once both its listeners
 * are up. Give the config's listeners port 0 (`listen = "127.0.0.1:0"` in
 * `[serve]` and `[gateway]`) so that suites running together do not collide;
 * the addresses it was given are read from its output.
 *
 * The process is killed by {@link BallastServe.stop} or, at the latest, when
 * this process exits — then its stderr is printed if the process failed.
 *
 * @param config the path (or file URL) of a `ballast.toml` with `{name}` placeholders
 * @throws Error when it cannot be started, exits, or prints no addresses in time; with its stderr
 * @example
 * const served = await startBallastServe(new URL('./ballast.toml', import.meta.url), {
 *   values: { upstream: sber.port },
 *   env: { BALLAST_GATEWAY_TOKEN: TOKEN },
 * });
 * const ballast = new BallastClient({ baseUrl: served.gateway, adminUrl: served.admin, token: TOKEN });
 * after(() => served.stop());
 */
export async function startBallastServe(config: string | URL, options: BallastServeOptions = {}): Promise<BallastServe> {
  const bin = options.bin ?? process.env['BALLAST_BIN'] ?? 'ballast';
  const file = config instanceof URL ? fileURLToPath(config) : config;
  const patience = options.startupTimeoutMs ?? 20_000;
  const dir = mkdtempSync(join(tmpdir(), 'ballast-serve-'));
  const configPath = join(dir, 'ballast.toml');
  try {
    writeFileSync(configPath, fillIn(readFileSync(file, 'utf8'), { ...options.values, dir }, file));
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  const child = spawn(bin, ['serve', '--config', configPath], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, ...options.env },
  });
  let stderr = '';
  child.stderr.setEncoding('utf8').on('data', (text: string) => {
    stderr = (stderr + text).slice(-64 * 1024);
  });
  const cleanUp = (code: number) => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
    if (code) process.stderr.write(`--- ballast serve's stderr:\n${stderr}\n`);
  };
  process.once('exit', cleanUp);

  let found: { admin?: string | undefined; gateway?: string | undefined };
  try {
    found = await new Promise((resolve, reject) => {
      const seen: { admin?: string | undefined; gateway?: string | undefined } = {};
      const fail = (why: string) => {
        clearTimeout(timer);
        reject(new Error(`ballast serve did not start: ${why}\n--- its stderr:\n${stderr}`));
      };
      const timer = setTimeout(() => fail(`no addresses within ${patience} ms`), patience);
      child.once('error', (e) =>
        fail(`${bin}: ${e.message} (set BALLAST_BIN to the ballast binary, or pass { bin })`),
      );
      child.once('exit', (code, signal) => fail(`it exited (${signal ?? code})`));
      createInterface({ input: child.stdout }).on('line', (line) => {
        seen.admin ??= /^ballast serve: listening on (http:\/\/\S+)/.exec(line)?.[1];
        seen.gateway ??= /^ballast serve: gateway on (http:\/\/\S+)/.exec(line)?.[1];
        if (seen.admin && seen.gateway) {
          clearTimeout(timer);
          resolve(seen);
        }
      });
    });
  } catch (error) {
    process.off('exit', cleanUp);
    cleanUp(0);
    throw error;
  }

  return {
    admin: found.admin!,
    gateway: found.gateway!,
    dir,
    stderr: () => stderr,
    stop: async () => {
      // The exit hook stays: it prints the stderr of a run whose process fails afterwards.
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise((resolve) => child.once('exit', resolve));
        child.kill('SIGKILL');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `text` with each `{name}` in it replaced by `values[name]`; `file` is named if one has no value. */
function fillIn(text: string, values: Record<string, string | number>, file: string): string {
  return text.replace(/\{(\w+)\}/g, (_, name: string) => {
    if (!Object.hasOwn(values, name)) throw new Error(`${file}: no value for {${name}}`);
    return String(values[name]);
  });
}
