// graphile-worker 0.18 draining no-op jobs on the PostgreSQL database the
// ballast queue bench uses, in a schema of its own (dropped afterwards).
//
//   node bench.js --url URL --tasks N --processes P [--batch B] [--single S]
//
// Prints one line:
//   graphile processes=P enqueue_single=R enqueue_batch=R processing=R
// (tasks per second). Batched mode: each process runs 24 concurrent jobs fed
// from a local queue of 500 locked jobs, and completions are batched
// (completeJobBatchDelay 0) — graphile-worker's documented high-throughput
// settings.
"use strict";

const { fork } = require("node:child_process");
const { Pool } = require("pg");
const { run, runMigrations, makeWorkerUtils, Logger } = require("graphile-worker");

// Errors only: the default logger writes a line per job, which would be measured too.
const logger = new Logger(() => (level, message) => {
  if (level === "error") console.error(message);
});

const CONCURRENCY = 24;
const LOCAL_QUEUE = 500;

function args() {
  const out = { url: process.env.BALLAST_TEST_PG, tasks: 100000, processes: 2, batch: 50, single: 0, schema: null };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === "--url") out.url = value;
    else if (flag === "--tasks") out.tasks = Number(value);
    else if (flag === "--processes") out.processes = Number(value);
    else if (flag === "--batch") out.batch = Number(value);
    else if (flag === "--single") out.single = Number(value);
    else if (flag === "--child-schema") out.schema = value;
    else throw new Error(`unknown flag ${flag}`);
  }
  if (!out.url) throw new Error("--url or BALLAST_TEST_PG is needed");
  return out;
}

// A worker process: runs jobs until told to stop, reporting how many it ran.
async function child(opts) {
  let handled = 0;
  const runner = await run({
    connectionString: opts.url,
    schema: opts.schema,
    concurrency: CONCURRENCY,
    noHandleSignals: true,
    pollInterval: 10,
    logger,
    preset: {
      worker: {
        localQueue: { size: LOCAL_QUEUE },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
    taskList: {
      noop: async () => {
        handled += 1;
      },
    },
  });
  process.send({ ready: true });
  process.on("message", async (msg) => {
    if (msg === "stop") {
      await runner.stop();
      process.send({ handled, stopped: true });
      process.exit(0);
    }
  });
}

async function parent(opts) {
  const schema = `graphile_bench_${process.pid}`;
  const pool = new Pool({ connectionString: opts.url, max: 2 });
  await runMigrations({ connectionString: opts.url, schema, logger });
  const utils = await makeWorkerUtils({ connectionString: opts.url, schema, logger });
  try {
    // Jobs enqueued one by one (default tasks / 10), then removed.
    const single = opts.single || Math.max(1, Math.floor(opts.tasks / 10));
    let start = process.hrtime.bigint();
    for (let i = 0; i < single; i++) {
      await utils.addJob("noop-single", { i });
    }
    const enqueueSingle = single / (Number(process.hrtime.bigint() - start) / 1e9);
    await pool.query(`DELETE FROM ${schema}._private_jobs`);

    start = process.hrtime.bigint();
    for (let next = 0; next < opts.tasks; next += opts.batch) {
      const end = Math.min(next + opts.batch, opts.tasks);
      const specs = [];
      for (let i = next; i < end; i++) specs.push({ identifier: "noop", payload: { i } });
      await utils.addJobs(specs);
    }
    const enqueueBatch = opts.tasks / (Number(process.hrtime.bigint() - start) / 1e9);
    await pool.query(`ANALYZE ${schema}._private_jobs`);

    // The clock starts when the first process has connected and is running
    // jobs (Node's start-up is not counted; work done before that is a head
    // start for the peer, not for ballast).
    const children = [];
    let firstReady;
    const ready = new Promise((resolve) => (firstReady = resolve));
    for (let p = 0; p < opts.processes; p++) {
      const c = fork(__filename, ["--url", opts.url, "--child-schema", schema], { stdio: "inherit" });
      c.on("message", (m) => m.ready && firstReady());
      children.push(c);
    }
    await ready;
    start = process.hrtime.bigint();
    const deadline = Date.now() + 900000;
    // Graphile deletes a job when it completes: drained = no job row left.
    while ((await pool.query(`SELECT EXISTS (SELECT 1 FROM ${schema}._private_jobs) AS left`)).rows[0].left) {
      if (Date.now() > deadline) throw new Error("graphile-worker did not drain within 15 minutes");
      await new Promise((r) => setTimeout(r, 5));
    }
    const processing = opts.tasks / (Number(process.hrtime.bigint() - start) / 1e9);
    const stopped = children.map(
      (c) => new Promise((resolve) => c.on("message", (m) => m.stopped && resolve(m.handled))),
    );
    for (const c of children) c.send("stop");
    const handled = (await Promise.all(stopped)).reduce((a, b) => a + b, 0);
    if (handled !== opts.tasks) throw new Error(`graphile-worker ran ${handled} of ${opts.tasks} jobs`);
    console.log(
      `graphile processes=${opts.processes} enqueue_single=${enqueueSingle.toFixed(0)} ` +
        `enqueue_batch=${enqueueBatch.toFixed(0)} processing=${processing.toFixed(0)}`,
    );
  } finally {
    await utils.release();
    await pool.query(`DROP SCHEMA ${schema} CASCADE`);
    await pool.end();
  }
}

const opts = args();
(opts.schema ? child(opts) : parent(opts)).catch((e) => {
  console.error(e);
  process.exit(1);
});
