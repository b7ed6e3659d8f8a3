#!/usr/bin/env bash
# tickwheel beside its peers (BENCHMARKS.md "Peers", issue 14) on one commit, as sessions 13 and 24 ran it: that
# commit's code on its own fresh single-node servers on $PEERS_HOST (default 127.0.0.14), tickwheel warmed up first
# (`benchmarks.sustained` at 300 runs/s for $WARMUP s, default 60: the nodes' JIT, as the ABBA legs are), then for
# each RATE one window of RATE x $WINDOW runs (default 30 s): tickwheel, Celery and APScheduler (`peers.compare`,
# Celery on the servers' Redis, database 1), then arq (database 2). Take `flock /work/bench.lock` around it.
#
#   benchmarks/peers.sh TAG COMMIT RATE...        e.g. benchmarks/peers.sh p1 main 300 600
#
# arq pins redis<6, so it runs from a venv of its own: $PEERS_VENV (default .stack/peers-venv), made here when
# missing. Output in $PEERS_DIR/TAG (default /tmp/peers-runs): compare-RATE.{log,json}, arq-RATE.{log,json}.
set -uo pipefail
[ $# -ge 3 ] || { sed -n 2,10p "$0"; exit 2; }
tag=$1 commit=$2
shift 2
source "$(dirname "$0")/leg.sh"
repo=$leg_repo py=$leg_py
dir=${PEERS_DIR:-/tmp/peers-runs}/$tag
host=${PEERS_HOST:-127.0.0.14}
window=${WINDOW:-30}
venv=${PEERS_VENV:-$repo/.stack/peers-venv}
if [ ! -x "$venv/bin/python" ]; then
  echo "== arq's venv in $venv"
  python3 -m venv "$venv" && "$venv/bin/pip" install -q -e "$repo" "arq>=0.26" requests \
    || { echo "peers: arq's venv failed" >&2; exit 1; }
fi
leg_prepare "$dir" "$commit" || exit 1
echo "== $tag: $commit $(git -C "$repo" rev-parse --short "$commit") servers $(date -u +%T) load $(leg_load)"
leg_up "$dir" "$host" "peers$tag" || exit 1
redis=$(sed -n 's/^TICKWHEEL_REDIS=\(redis:\/\/[^/]*\).*/\1/p' "$dir/platform/.stack/env")  # the servers' Redis
sleep 20
export TICKWHEEL_ENV_FILE=$dir/platform/.stack/env
echo "== warm-up $(date -u +%T) load $(leg_load)"
(cd "$dir/platform" && "$py" -m benchmarks.sustained --idle 0 --warmup "${WARMUP:-60}" --rates 300 --seconds 30 \
   --keep-going) > "$dir/warmup.log" 2>&1 || echo "peers: the warm-up failed" >&2
for rate in "$@"; do
  runs=$((rate * window)) tenants=$(((rate + 99) / 100))
  common=(--runs "$runs" --window "$window" --lead 10 --ahead 5 --drain 45 --tenants "$tenants")
  echo "== rate $rate: tickwheel, Celery, APScheduler $(date -u +%T) load $(leg_load)"
  (cd "$dir/platform" && TWBENCH_CELERY_BROKER=$redis/1 "$py" -m benchmarks.peers.compare "${common[@]}" \
     --systems tickwheel,celery,apscheduler --json "$dir/compare-$rate.json") > "$dir/compare-$rate.log" 2>&1 \
    || echo "peers: compare at $rate failed" >&2
  echo "== rate $rate: arq $(date -u +%T) load $(leg_load)"
  (cd "$dir/platform" && TWBENCH_ARQ_REDIS=$redis/2 "$venv/bin/python" -m benchmarks.peers.arq_bench "${common[@]}" \
     --json "$dir/arq-$rate.json") > "$dir/arq-$rate.log" 2>&1 || echo "peers: arq at $rate failed" >&2
  grep -h "delivered" "$dir/compare-$rate.log" "$dir/arq-$rate.log" | cut -c1-400
done
echo "== down $(date -u +%T) load $(leg_load)"
leg_down "$dir"
