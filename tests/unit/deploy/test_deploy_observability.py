"""The dashboard, the alert rules and the chart's KEDA query only use metrics the code exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from prometheus_client.metrics import MetricWrapperBase

from tickwheel import metrics

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
CHART = DEPLOY / "helm" / "tickwheel"
# Exported by other programs: kafka-exporter (danielqsj/kafka_exporter) and Prometheus itself.
EXTERNAL = {"kafka_consumergroup_lag", "up"}
SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"), "gauge": ("",)}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}


def exported_series() -> set[str]:
    """Every series name prometheus_client writes for the metrics of tickwheel/metrics.py."""
    names: set[str] = set()
    for value in vars(metrics).values():
        if isinstance(value, MetricWrapperBase):
            for family in value.describe():
                names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (not functions, labels, keywords or numbers)."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    tokens = re.finditer(r"(?<![\w.])([a-zA-Z_:][a-zA-Z0-9_:]*)(\s*\()?", expr)
    return {m.group(1) for m in tokens if not m.group(2) and m.group(1) not in KEYWORDS}


def alert_exprs() -> list[str]:
    rules = yaml.safe_load((CHART / "files" / "alerts.yaml").read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "dashboards" / "tickwheel.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):  # label_values(<metric>, <label>)
            exprs.append(re.sub(r"^label_values\(([^,]+),.*\)$", r"\1", query["query"]))
    return exprs


def chart_exprs() -> list[str]:
    """Metric names written literally in the chart's templates (the KEDA forecast trigger)."""
    text = "\n".join(p.read_text() for p in (CHART / "templates").glob("*.yaml"))
    return re.findall(r"tickwheel_[a-z0-9_]+(?=\{)", text)


def unknown(exprs: list[str]) -> dict[str, set[str]]:
    known = exported_series() | EXTERNAL
    found = {expr: metric_names(expr) - known for expr in exprs}
    return {expr: names for expr, names in found.items() if names}


def test_the_extractor_reads_metric_names_and_skips_functions_labels_and_keywords() -> None:
    expr = (
        'histogram_quantile(0.99, sum by (lane, le) (rate(tickwheel_fire_lag_seconds_bucket{lane="urgent"}[5m])))'
        " / on (lane) group_left sum(tickwheel_fired_total offset 1d) > bool 5"
    )

    assert metric_names(expr) == {"tickwheel_fire_lag_seconds_bucket", "tickwheel_fired_total"}


def test_a_misspelled_or_unsuffixed_metric_is_reported() -> None:
    assert unknown(["rate(tickwheel_dead_letter_total[5m])", "tickwheel_fire_lag_seconds"]) == {
        "rate(tickwheel_dead_letter_total[5m])": {"tickwheel_dead_letter_total"},
        "tickwheel_fire_lag_seconds": {"tickwheel_fire_lag_seconds"},
    }


def test_every_metric_the_alert_rules_use_is_exported_by_the_code() -> None:
    exprs = alert_exprs()

    assert len(exprs) >= 10
    assert unknown(exprs) == {}


def test_every_metric_the_dashboard_uses_is_exported_by_the_code() -> None:
    exprs = dashboard_exprs()

    assert len(exprs) >= 20
    assert unknown(exprs) == {}


def test_the_keda_forecast_trigger_reads_the_coordinators_forecast_gauge() -> None:
    assert chart_exprs() == ["tickwheel_forecast_due_runs"]
    assert "tickwheel_forecast_due_runs" in exported_series()


def test_the_alerts_cover_the_failures_the_issue_names() -> None:
    used = set().union(*(metric_names(e) for e in alert_exprs()))

    assert {
        "tickwheel_fire_lag_seconds_bucket",
        "tickwheel_dead_letters_total",
        "tickwheel_unowned_shards",
        "kafka_consumergroup_lag",
        "tickwheel_sweeper_repairs_total",
        "tickwheel_backend_errors_total",
    } <= used


def test_the_keda_triggers_watch_the_groups_and_topics_the_workers_consume() -> None:
    from tickwheel.settings import build
    from worker.consumer import LaneConsumer

    keda = yaml.safe_load((CHART / "values.yaml").read_text())["worker"]["autoscaling"]["keda"]
    settings = build({"TICKWHEEL_KAFKA_TOPIC_PREFIX": "ns."})

    async def handle(run: object) -> None:
        return None

    for lane in ("urgent", "default", "bulk"):
        consumer = LaneConsumer(settings, lane, handle)
        # as templates/scaledobjects.yaml names them, from the topic prefix and consumerGroupPrefix
        assert consumer.group == f"ns.{keda['consumerGroupPrefix']}{lane}"
        assert consumer.topic == f"ns.tickwheel.runs.{lane}"
