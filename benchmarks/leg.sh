# Sourced by the leg scripts (abba.sh, peak.sh, peers.sh): one commit's code on its own fresh single-node servers
# and platform, so that each leg measures that commit's server settings too and nothing a previous leg left.
#
#   source "$(dirname "$0")/leg.sh"
#   leg_prepare DIR COMMIT          a fresh DIR: code/ (the commit's tree, exported as PYTHONPATH), servers/, platform/
#   leg_up DIR HOST NAME [ARG...]   servers on HOST from the leg's code, then the platform (ARGs: `private_platform
#                                   up`); if either fails, whatever came up goes down again and it returns 1
#   leg_down DIR                    the platform, then the servers (whatever came up)
#   leg_load                        the load average, for the log lines

leg_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
leg_py=$leg_repo/.venv/bin/python

leg_load() { cut -d' ' -f1-3 /proc/loadavg; }

leg_prepare() {
  local dir=$1 commit=$2 jars=$leg_repo/.stack/lib  # the servers' jars, resolved once by the dev stack
  [ -d "$jars" ] || { echo "$jars missing: run .venv/bin/tickwheel stack up once" >&2; return 1; }
  rm -rf "$dir"
  mkdir -p "$dir/code" "$dir/servers" "$dir/platform"
  git -C "$leg_repo" archive "$commit" | tar -x -C "$dir/code"
  ln -s "$jars" "$dir/servers/lib"
  export PYTHONPATH=$dir/code
}

leg_up() {
  local dir=$1 host=$2 name=$3
  shift 3
  (cd "$dir/code" && "$leg_py" -m tickwheel.cli stack up --nodes 1 --hosts "$host" --dir "$dir/servers") \
    > "$dir/stack.log" 2>&1 || { _leg_failed "$dir" stack; return 1; }
  (cd "$dir/platform" && "$leg_py" -m benchmarks.private_platform up --servers "$dir/servers" --name "$name" "$@") \
    > "$dir/platform.log" 2>&1 || { _leg_failed "$dir" platform; return 1; }
}

_leg_failed() {  # DIR WHAT: WHAT's log tail, then down with whatever came up
  echo "$2 up failed:" >&2
  tail -3 "$1/$2.log" >&2
  leg_down "$1"
}

leg_down() {
  local dir=$1
  (cd "$dir/platform" && "$leg_py" -m benchmarks.private_platform down) >> "$dir/platform.log" 2>&1 || true
  (cd "$dir/code" && "$leg_py" -m tickwheel.cli stack down --nodes 1 --dir "$dir/servers") >> "$dir/stack.log" 2>&1 || true
}
