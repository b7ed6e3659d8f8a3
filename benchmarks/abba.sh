#!/usr/bin/env bash
# Side-by-side legs of the sustained workload (BENCHMARKS.md, issue 14): each leg runs one commit's code on its own
# fresh single-node servers, started from that commit (so server settings are measured too), one api, dispatcher,
# worker and coordinator, a warm-up step and a measured step of `benchmarks.sustained`. Legs run one after another
# in the order given (ABBA: A B B A), each on a quiet box; take `flock /work/bench.lock` around it on a shared one.
#
#   benchmarks/abba.sh TAG RATE SECONDS WARMUP LEG...
#   LEG = COMMIT[+KEY=VALUE[+KEY=VALUE...]]   settings passed to `private_platform up --set`
#   e.g. benchmarks/abba.sh a1 300 120 60 main feature feature main
#
# Each leg's output lands in $ABBA_DIR/TAG-N/ (default /tmp/abba): the code, the servers, leg.log and the
# sustained step's JSON (code/benchmarks/results/); `python -m benchmarks.abba_rows $ABBA_DIR/TAG-*` prints the
# table. The servers listen on $ABBA_HOST (default 127.0.0.14), so the dev stack on 127.0.0.1 may stay up (idle);
# $ABBA_TENANTS (default 4) tenants share the jobs.
set -euo pipefail
[ $# -ge 5 ] || { sed -n 2,14p "$0"; exit 2; }
tag=$1 rate=$2 seconds=$3 warmup=$4
shift 4
source "$(dirname "$0")/leg.sh"
out=${ABBA_DIR:-/tmp/abba}
host=${ABBA_HOST:-127.0.0.14}
# Each tenant may hold 100,000 jobs (the platform's default quota) and a delivered one-off job is kept: warm-up and
# step must fit, e.g. 600 runs/s for 180 + 600 s is 468,000 jobs, refused past 400,000 with 4 tenants.
tenants=${ABBA_TENANTS:-4}

n=0
for leg in "$@"; do
  n=$((n + 1))
  commit=${leg%%+*}
  sets=()
  if [ "$leg" != "$commit" ]; then
    IFS=+ read -r -a pairs <<< "${leg#*+}"
    for pair in "${pairs[@]}"; do sets+=(--set "$pair"); done
  fi
  dir=$out/$tag-$n
  leg_prepare "$dir" "$commit"
  echo "$leg $(git -C "$leg_repo" rev-parse --short "$commit")" > "$dir/leg"
  echo "== $tag-$n: $leg ($(date -u +%T), load $(leg_load))"
  leg_up "$dir" "$host" "$tag$n" ${sets[@]+"${sets[@]}"} || exit 1
  sleep 20
  (cd "$dir/platform" && TICKWHEEL_ENV_FILE=$dir/platform/.stack/env "$leg_py" -m benchmarks.sustained --idle 0 \
     --warmup "$warmup" --rates "$rate" --seconds "$seconds" --tenants "$tenants" --keep-going) > "$dir/leg.log" 2>&1 \
    || echo "abba: $tag-$n: sustained failed" >&2
  leg_down "$dir"
  tail -4 "$dir/leg.log"
done
