"""Validate `helm template` output offline: every object against the Kubernetes schemas (kubernetes-validate,
strict), the CRDs against the small schemas in deploy/crd-schemas/, every TICKWHEEL_* variable against the
settings tree, and the promises the chart makes (probes, hardening, a PDB per Deployment, lanes covered).

    helm template ... | python deploy/check_rendered.py --kube-version 1.33.0 -
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from schemas.messages import LANES
from tickwheel.errors import SettingsError
from tickwheel.settings import PREFIX, _known_keys, build

HERE = Path(__file__).parent
CRD_SCHEMAS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): "servicemonitor.json",
    ("monitoring.coreos.com/v1", "PrometheusRule"): "prometheusrule.json",
    ("keda.sh/v1alpha1", "ScaledObject"): "scaledobject.json",
}
Doc = dict[str, Any]


def name_of(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def schema_errors(doc: Doc, kube_version: str) -> Iterator[str]:
    crd = CRD_SCHEMAS.get((doc.get("apiVersion"), doc.get("kind")))
    if crd:
        schema = json.loads((HERE / "crd-schemas" / crd).read_text())
        for error in jsonschema.Draft7Validator(schema).iter_errors(doc):
            yield f"{name_of(doc)}: {'.'.join(map(str, error.absolute_path))}: {error.message}"
        return
    try:
        kubernetes_validate.validate(doc, kube_version, strict=True)
    except (kubernetes_validate.ValidationError, kubernetes_validate.SchemaNotFoundError) as exc:
        yield f"{name_of(doc)}: {exc}"


def pod_spec(doc: Doc) -> Doc | None:
    if doc["kind"] in {"Deployment", "Job"}:
        return doc["spec"]["template"]["spec"]
    return None


def settings_errors(doc: Doc, config_maps: dict[str, dict[str, str]]) -> Iterator[str]:
    """Build the settings tree from exactly what each container would see (ConfigMap, env, Secret refs)."""
    spec = pod_spec(doc)
    if spec is None:
        return
    known = _known_keys()
    for container in spec["containers"]:
        values: dict[str, str] = {}
        for source in container.get("envFrom", []):
            values.update(config_maps.get(source.get("configMapRef", {}).get("name", ""), {}))
        secret_keys = []
        for env in container.get("env") or []:
            if "value" in env:
                values[env["name"]] = env["value"]
            else:
                secret_keys.append(env["name"])
        for key in [k for k in values if k.startswith(PREFIX)] + secret_keys:
            if key not in known:
                yield f"{name_of(doc)}: {key} is not a tickwheel setting"
        try:
            settings = build({k: v for k, v in values.items() if k in known})
        except SettingsError as exc:
            yield f"{name_of(doc)}: {exc.message}"
            continue
        grace_s = spec.get("terminationGracePeriodSeconds", 30)
        if container.get("args") == ["worker"] and grace_s < settings.worker.shutdown_grace_s + 10:
            yield f"{name_of(doc)}: terminationGracePeriodSeconds {grace_s} leaves no time to hand back runs after "
            f"shutdown_grace_s {settings.worker.shutdown_grace_s}"


def hardening_errors(doc: Doc) -> Iterator[str]:
    spec = pod_spec(doc)
    if spec is None:
        return
    where = name_of(doc)
    if spec.get("enableServiceLinks") is not False:
        yield f"{where}: enableServiceLinks must be false (service env vars collide with TICKWHEEL_*)"
    if spec.get("automountServiceAccountToken") is not False:
        yield f"{where}: automountServiceAccountToken must be false"
    if not spec.get("securityContext", {}).get("runAsNonRoot"):
        yield f"{where}: runAsNonRoot must be true"
    for container in spec["containers"]:
        context = container.get("securityContext", {})
        if not context.get("readOnlyRootFilesystem") or context.get("allowPrivilegeEscalation") is not False:
            yield f"{where}: read-only root fs and no privilege escalation required"
        if context.get("capabilities", {}).get("drop") != ["ALL"]:
            yield f"{where}: capabilities must drop ALL"
        if doc["kind"] == "Deployment":
            yield from probe_errors(where, container)


def probe_errors(where: str, container: Doc) -> Iterator[str]:
    expected = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in expected.items():
        if container.get(probe, {}).get("httpGet", {}).get("path") != path:
            yield f"{where}: {probe} must GET {path}"


def release_errors(docs: list[Doc]) -> Iterator[str]:
    """Relations between objects: a PDB per Deployment, every lane consumed, KEDA targets that exist."""
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    pdb_selectors = [d["spec"]["selector"]["matchLabels"] for d in docs if d["kind"] == "PodDisruptionBudget"]
    consumed: set[str] = set()
    for name, deployment in deployments.items():
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        if not any(sel.items() <= labels.items() for sel in pdb_selectors):
            yield f"Deployment/{name}: no PodDisruptionBudget selects its pods"
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            if container["args"] == ["worker"]:
                lanes = {e["value"] for e in container.get("env") or [] if e["name"] == "TICKWHEEL_WORKER_LANES"}
                consumed.update(lane for value in lanes for lane in value.split(","))
    if missing := set(LANES) - consumed:
        yield f"no worker Deployment consumes lanes {sorted(missing)}"
    for scaled in (d for d in docs if d["kind"] == "ScaledObject"):
        target = deployments.get(scaled["spec"]["scaleTargetRef"]["name"])
        if target is None:
            yield f"{name_of(scaled)}: scales a Deployment that does not exist"
        elif "replicas" in target["spec"]:
            yield f"{name_of(scaled)}: its Deployment also sets replicas (they would fight)"


def check(text: str, kube_version: str) -> list[str]:
    docs = [d for d in yaml.safe_load_all(text) if d]
    config_maps = {d["metadata"]["name"]: d.get("data", {}) for d in docs if d["kind"] == "ConfigMap"}
    errors: list[str] = []
    for doc in docs:
        errors += schema_errors(doc, kube_version)
        errors += settings_errors(doc, config_maps)
        errors += hardening_errors(doc)
    errors += release_errors(docs)
    kinds = sorted({d["kind"] for d in docs})
    print(f"  {len(docs)} objects ({', '.join(kinds)}): {len(errors)} problems")
    return errors


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kube-version", default="1.33.0")
    parser.add_argument("file", help="rendered manifests, or - for stdin")
    args = parser.parse_args(argv)
    text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text()
    errors = check(text, args.kube_version)
    for error in errors:
        print(f"  ERROR {error}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
