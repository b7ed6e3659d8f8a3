#!/usr/bin/env bash
# The 100,000-run peak (BENCHMARKS.md "Peak", issue 14) on one commit, as sessions 13, 24 and 25 ran it: that
# commit's code on its own fresh single-node servers on $PEAK_HOST (default 127.0.0.13), one api, dispatcher and
# coordinator, a `default,bulk` worker and an `urgent` worker of its own, the per-tenant request limit raised for the
# script's 4 bulk tenants, then `benchmarks.peak`. Take `flock /work/bench.lock` around it on a shared box.
#
#   benchmarks/peak.sh TAG COMMIT [RUNS]
#
# With PEAK_TIMELINE=1 it also records the dispatcher from 10 s before the instant to 30 s after it (py-spy at 100 Hz,
# speedscope), with a py-spy dump of the dispatcher and of the urgent worker and their CPU ticks every ~0.4 s: what
# the loops were doing when a run was late. Output in $PEAK_DIR/TAG (default /tmp/peak): the code, servers,
# platform.log, peak.log, the dispatcher's and workers' metrics at the end, and timeline/ when asked for.
set -uo pipefail
[ $# -ge 2 ] || { sed -n 2,12p "$0"; exit 2; }
tag=$1 commit=$2 runs=${3:-100000}
source "$(dirname "$0")/leg.sh"
repo=$leg_repo py=$leg_py
dir=${PEAK_DIR:-/tmp/peak}/$tag
host=${PEAK_HOST:-127.0.0.13}
create_rate=400  # the instant is set runs/create_rate + 15 s after the start: every create lands before it
leg_prepare "$dir" "$commit" || exit 1
echo "== $tag: $commit $(git -C "$repo" rev-parse --short "$commit") servers $(date -u +%T) load $(leg_load)"
leg_up "$dir" "$host" "peak$tag" --urgent-worker --set TICKWHEEL_API_REQUESTS_PER_S=2000 || exit 1
ready() { grep -o "^$1: ready, pid [0-9]*.*" "$dir/platform.log"; }
pid_of() { ready "$1" | sed 's/.*pid \([0-9]*\).*/\1/'; }
metrics_of() {
  local line; line=$(ready "$1")
  case $line in
    *http*) echo "$line" | grep -o 'http[^ ]*' ;;
    *) echo "http://127.0.0.1:$(echo "$line" | sed 's/.*port \([0-9]*\).*/\1/')/metrics" ;;
  esac
}
sleep 20
start=$(date +%s)
echo "== peak $(date -u +%T) load $(leg_load)"
(cd "$dir/platform" && TICKWHEEL_ENV_FILE=$dir/platform/.stack/env "$py" -m benchmarks.peak --runs "$runs" \
   --create-rate "$create_rate" --drain-rate 250 --urgent-rate 2 --concurrency 96 --max-drain 900) > "$dir/peak.log" 2>&1 &
peak=$!
if [ "${PEAK_TIMELINE:-0}" = 1 ]; then
  (
    spy=$repo/.venv/bin/py-spy out=$dir/timeline
    dispatcher=$(pid_of dispatcher) urgent=$(pid_of worker-2)
    mkdir -p "$out"
    sleep $((start + runs / create_rate + 5 - $(date +%s)))  # 10 s before the instant
    "$spy" record --nonblocking -r 100 -d 40 -f speedscope -o "$out/dispatcher.speedscope" -p "$dispatcher" > /dev/null 2>&1 &
    until=$(($(date +%s) + 40))
    while [ "$(date +%s)" -lt "$until" ]; do
      at=$(date -u +%T.%N | cut -c1-12)
      "$spy" dump --nonblocking -p "$dispatcher" > "$out/dispatcher-$at.txt" 2>&1
      "$spy" dump --nonblocking -p "$urgent" > "$out/urgent-$at.txt" 2>&1
      for pid in "$dispatcher" "$urgent"; do echo "$at $pid $(cut -d' ' -f14,15 "/proc/$pid/stat")"; done >> "$out/ticks.txt"
      sleep 0.3
    done
  ) &
fi
wait "$peak" || echo "peak: benchmarks.peak failed" >&2
for name in dispatcher worker worker-2; do curl -s "$(metrics_of $name)" > "$dir/$name.metrics"; done
echo "== down $(date -u +%T) load $(leg_load)"
leg_down "$dir"
wait
tail -8 "$dir/peak.log"
