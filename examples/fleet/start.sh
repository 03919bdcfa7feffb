#!/usr/bin/env bash
# Starts three replicas of `ballast serve` on one PostgreSQL queue, on this
# machine, and lists the fleet; Ctrl-C stops them all.
#
#   FLEET_PG=postgres://user@host/db ./examples/fleet/start.sh
#
# Each replica prints its admin and gateway addresses; every replica's
# dashboard has the same Fleet page (http://ADMIN/ui/fleet).
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build -q --release -p ballast-cli
config="$(mktemp -d)/ballast.toml"
sed "s|^url = .*|url = \"${FLEET_PG:-postgres://postgres@127.0.0.1:5432/test}\"|" examples/fleet/ballast.toml >"$config"
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT INT TERM
for n in 1 2 3; do
  ./target/release/ballast serve --config "$config" --listen 127.0.0.1:0 2>"${config%.toml}-$n.log" | sed -u "s/^/replica $n: /" &
  pids+=($!)
done
sleep 3
./target/release/ballast fleet --config "$config"
wait
