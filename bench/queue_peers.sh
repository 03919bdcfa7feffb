#!/usr/bin/env bash
# ballast-queue beside its peers, in one run, on one PostgreSQL database (and
# SQLite beside its bare loop): the table of BENCHMARKS.md, "Durable queue".
#
#   BALLAST_TEST_PG=postgres://postgres@127.0.0.1:5432/test bench/queue_peers.sh \
#       [--tasks 100000] [--runs 3] [--river-default-tasks 10000] [--no-river] [--no-graphile] [--scale] \
#       [--history 1000000] [--latency 200]
#
# Each round runs every system once, one after the other (rounds interleave
# the systems, so a load spike from elsewhere hits one round of each rather
# than every run of one); the figures are the medians over the rounds, and the
# ratios are of those medians. Needs cargo, node >= 20 and npm (graphile-worker
# is installed into bench/graphile/node_modules on first use).
#
# Systems (no-op handler, tasks enqueued first, then drained):
#   ballast pg tuned      queue_bench --workers 4 --batch 50 (concurrency 50 each)
#   ballast pg defaults   queue_bench --workers 1 --defaults (Worker::builder untouched)
#   bare loop             queue_bench --compare: 4 loops of the two-transaction SQL
#   River tuned/default   bench/river: 1,000 workers, 1 ms fetch cooldown, 10 ms poll / River's defaults, 100 workers
#   graphile-worker       bench/graphile: 2 processes, local queue 500, batched completion
#   ballast sqlite        queue_bench --backend sqlite --workers 1 --compare, and --defaults
# --scale adds ballast on PostgreSQL with 1, 2 and 4 worker processes (1 worker each, batch 50).
# --history N adds, in every round, each backend's default worker on a table
#   already holding N finished tasks (a week of history before retention ran),
#   and its ratio to the same worker on the empty table.
# --latency S adds, once after the rounds, the claim latency of one task due at
#   a time (S samples per path: woken in the process; NOTIFY or the poll).
set -euo pipefail

TASKS=100000
RUNS=3
RIVER_DEFAULT_TASKS=10000
# Peers' one-by-one enqueue count (ballast's is tasks / 10).
SINGLE=500
RIVER=1
GRAPHILE=1
SCALE=0
HISTORY=0
LATENCY=0
while [ $# -gt 0 ]; do
    case "$1" in
        --tasks) TASKS=$2; shift 2 ;;
        --runs) RUNS=$2; shift 2 ;;
        --river-default-tasks) RIVER_DEFAULT_TASKS=$2; shift 2 ;;
        --no-river) RIVER=0; shift ;;
        --no-graphile) GRAPHILE=0; shift ;;
        --scale) SCALE=1; shift ;;
        --history) HISTORY=$2; shift 2 ;;
        --latency) LATENCY=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
: "${BALLAST_TEST_PG:?set BALLAST_TEST_PG to a PostgreSQL URL}"

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export CARGO_INCREMENTAL=0
cargo build --release -q -p ballast-bench --bin queue_bench
QB="${CARGO_TARGET_DIR:-$ROOT/target}/release/queue_bench"
if [ "$RIVER" = 1 ]; then
    (cd bench/river && CARGO_TARGET_DIR="$ROOT/bench/river/target" cargo build --release -q)
fi
if [ "$GRAPHILE" = 1 ] && [ ! -d bench/graphile/node_modules/graphile-worker ]; then
    (cd bench/graphile && npm install --no-audit --no-fund --loglevel=error)
fi

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

# Records "system<TAB>measurement<TAB>tasks/s" lines in $OUT.
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >>"$OUT"; }

# The tasks/s column of queue_bench's row whose measurement starts with $2.
qb_rate() { awk -F'|' -v m="$2" 'index($3, " " m) == 1 { gsub(/ /, "", $8); print $8 }' <<<"$1"; }

# The value of key $2 in a "name key=value ..." line.
kv() { tr ' ' '\n' <<<"$1" | awk -F= -v k="$2" '$1 == k { print $2 }'; }

echo "load before: $(cat /proc/loadavg)"
for run in $(seq 1 "$RUNS"); do
    echo "round $run of $RUNS ($(date -u +%H:%M:%S), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2

    rows=$("$QB" --backend postgres --tasks "$TASKS" --batch 50 --workers 4 --compare --no-header)
    record "bare loop (pg, 4 loops, 2 tx per batch of 50)" processing "$(qb_rate "$rows" 'raw SQL loop')"
    record "ballast pg (4 workers × 50)" enqueue_single "$(qb_rate "$rows" 'enqueue, one by one')"
    record "ballast pg (4 workers × 50)" enqueue_batch "$(qb_rate "$rows" 'enqueue_batch')"
    record "ballast pg (4 workers × 50)" processing "$(qb_rate "$rows" 'processing')"

    rows=$("$QB" --backend postgres --tasks "$TASKS" --batch 50 --workers 1 --defaults --no-header)
    record "ballast pg (1 worker, defaults)" processing "$(qb_rate "$rows" 'processing')"

    if [ "$RIVER" = 1 ]; then
        line=$(bench/river/target/release/river-bench --url "$BALLAST_TEST_PG" --tasks "$TASKS" --config tuned \
            --single "$SINGLE")
        for m in enqueue_single enqueue_batch processing; do
            record "River tuned (1,000 workers, 1 ms cooldown)" "$m" "$(kv "$line" "$m")"
        done
        line=$(bench/river/target/release/river-bench --url "$BALLAST_TEST_PG" --tasks "$RIVER_DEFAULT_TASKS" \
            --config default --single 100)
        record "River defaults (100 workers)" processing "$(kv "$line" processing)"
    fi

    if [ "$GRAPHILE" = 1 ]; then
        line=$(node bench/graphile/bench.js --url "$BALLAST_TEST_PG" --tasks "$TASKS" --processes 2 --single "$SINGLE")
        for m in enqueue_single enqueue_batch processing; do
            record "graphile-worker (2 processes, batched)" "$m" "$(kv "$line" "$m")"
        done
    fi

    rows=$("$QB" --backend sqlite --tasks "$TASKS" --batch 50 --workers 1 --compare --no-header)
    record "bare loop (sqlite, batch 50)" processing "$(qb_rate "$rows" 'raw SQL loop')"
    record "ballast sqlite (1 worker × 50)" enqueue_single "$(qb_rate "$rows" 'enqueue, one by one')"
    record "ballast sqlite (1 worker × 50)" enqueue_batch "$(qb_rate "$rows" 'enqueue_batch')"
    record "ballast sqlite (1 worker × 50)" processing "$(qb_rate "$rows" 'processing')"
    rows=$("$QB" --backend sqlite --tasks "$TASKS" --batch 50 --workers 1 --defaults --no-header)
    record "ballast sqlite (1 worker, defaults)" processing "$(qb_rate "$rows" 'processing')"

    if [ "$HISTORY" -gt 0 ]; then
        rows=$("$QB" --backend postgres --tasks "$TASKS" --defaults --retained "$HISTORY" --no-header)
        record "ballast pg (1 worker, defaults), $HISTORY finished retained" processing "$(qb_rate "$rows" 'processing')"
        rows=$("$QB" --backend sqlite --tasks "$TASKS" --defaults --retained "$HISTORY" --no-header)
        record "ballast sqlite (1 worker, defaults), $HISTORY finished retained" processing "$(qb_rate "$rows" 'processing')"
    fi

    if [ "$SCALE" = 1 ]; then
        for p in 1 2 4; do
            rows=$("$QB" --backend postgres --tasks "$TASKS" --batch 50 --workers 1 --processes "$p" --no-header)
            record "ballast pg, $p process(es) × 1 worker × 50" processing "$(qb_rate "$rows" 'processing')"
        done
    fi
done
echo "load after: $(cat /proc/loadavg)"

if [ "$LATENCY" -gt 0 ]; then
    echo
    echo "claim latency, one task due at a time ($LATENCY samples per path):"
    echo
    echo "| backend | path | p50 | p99 |"
    echo "|---|---|---|---|"
    for backend in postgres sqlite; do
        "$QB" --backend "$backend" --tasks 1000 --defaults --latency "$LATENCY" --no-header |
            awk -F'|' 'index($3, " claim latency") == 1 { printf "|%s|%s|%s|%s|\n", $2, $3, $9, $10 }'
    done
fi

python3 - "$OUT" "$RUNS" <<'EOF'
import statistics, sys
from collections import OrderedDict

path, runs = sys.argv[1], int(sys.argv[2])
rates = OrderedDict()
for line in open(path, encoding="utf-8"):
    system, what, rate = line.rstrip("\n").split("\t")
    rates.setdefault((system, what), []).append(float(rate) if rate else float("nan"))
med = {k: statistics.median(v) for k, v in rates.items()}

print(f"\nmedians of {runs} interleaved rounds (tasks/s; every round in brackets)\n")
print("| system | measurement | tasks/s | rounds |")
print("|---|---|---|---|")
for (system, what), values in rates.items():
    rounds = ", ".join(f"{v:,.0f}" for v in values)
    print(f"| {system} | {what} | {med[(system, what)]:,.0f} | {rounds} |")

def ratio(a, b, target=None):
    ka, kb = (a, "processing"), (b, "processing")
    if ka not in med or kb not in med:
        return
    r = med[ka] / med[kb]
    verdict = "" if target is None else (f" (target ≥ {target}×: " + ("met" if r >= target else "MISSED") + ")")
    print(f"| {a} / {b} | {r:.2f}×{verdict} |")

print("\n| ratio (processing) | value |")
print("|---|---|")
# The defaults carry the targets: what a team gets without tuning.
pg = "ballast pg (4 workers × 50)"
ratio(pg, "bare loop (pg, 4 loops, 2 tx per batch of 50)")
ratio(pg, "graphile-worker (2 processes, batched)")
ratio(pg, "River tuned (1,000 workers, 1 ms cooldown)")
ratio(pg, "River defaults (100 workers)")
d = "ballast pg (1 worker, defaults)"
ratio(d, "bare loop (pg, 4 loops, 2 tx per batch of 50)", 0.8)
ratio(d, "graphile-worker (2 processes, batched)", 1.25)
ratio(d, "River tuned (1,000 workers, 1 ms cooldown)")
ratio(d, pg)
ratio("ballast sqlite (1 worker × 50)", "bare loop (sqlite, batch 50)")
ratio("ballast sqlite (1 worker, defaults)", "bare loop (sqlite, batch 50)", 0.9)
for key in list(med):
    system, what = key
    if what == "processing" and "finished retained" in system:
        ratio(system, system.rsplit(", ", 1)[0], 0.9)
EOF
