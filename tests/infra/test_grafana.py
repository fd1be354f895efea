"""The Grafana dashboard (infra/grafana.py, docs/grafana/gpuwarden.json; docs/deploy.md, "Grafana"):
every metric a panel reads is one the code emits, under the namespace and dimensions Powertools
actually writes, and the committed JSON is what the generator makes (a renamed metric fails both)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpuwarden.domain.actions import Metric
from infra import grafana
from infra.components.dashboard import NAMESPACE, SERVICE

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions" / "gpuwarden"


def targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            yield panel["title"], target


def emitted_by_the_code() -> set[str]:
    """The metric names the code passes to the emitters: every ``Metric.NAME`` read in functions/
    (``put(Metric.X)``, an action's ``_Spec(metric=Metric.X)``, `count_event`'s ``Metric.EVENTS``)."""
    names: set[str] = set()
    for path in FUNCTIONS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Metric":
                names.add(Metric[node.attr].value)
    return names


#: one value through each emitter, as a Lambda runs them (a process of its own: Powertools reads its
#: settings when `gpuwarden.observability` is imported)
_EMIT = """
from gpuwarden import observability
from gpuwarden.domain.actions import Metric
observability.put(Metric.PODS_EVICTED)
observability.metrics.flush_metrics()
observability.count_event("spot-interruption", "handled")
"""


def emf_documents() -> list[dict[str, Any]]:
    """The EMF documents Powertools prints with the functions' settings (infra/components/functions.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POWERTOOLS_")}
    env |= {"POWERTOOLS_SERVICE_NAME": SERVICE, "POWERTOOLS_METRICS_NAMESPACE": NAMESPACE}
    env["PYTHONPATH"] = os.pathsep.join([str(FUNCTIONS.parent), env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", _EMIT], env=env, capture_output=True, text=True, check=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_the_committed_dashboard_is_what_the_generator_makes() -> None:
    committed = grafana.OUTPUT.read_text()
    assert committed == grafana.render(), "run `python -m infra.grafana` and commit docs/grafana/gpuwarden.json"


def test_every_panel_reads_a_metric_the_code_emits_and_every_one_is_shown() -> None:
    dashboard = json.loads(grafana.OUTPUT.read_text())
    shown = {target["metricName"] for _, target in targets(dashboard)}
    emitted = emitted_by_the_code()
    assert shown - emitted == set(), "a panel reads a metric nothing emits"
    assert emitted - shown == set(), "a metric the code emits is on no panel"


def test_each_target_matches_the_emf_powertools_writes() -> None:
    # what a Lambda writes for a plain metric and for the per-event count, through the real emitters
    plain, event = emf_documents()
    written = {
        Metric.PODS_EVICTED.value: plain["_aws"]["CloudWatchMetrics"][0],
        Metric.EVENTS.value: event["_aws"]["CloudWatchMetrics"][0],
    }
    assert plain["service"] == event["service"] == SERVICE
    dashboard = json.loads(grafana.OUTPUT.read_text())
    for title, target in targets(dashboard):
        shape = written.get(target["metricName"], written[Metric.PODS_EVICTED.value])
        assert target["namespace"] == shape["Namespace"], title
        assert set(target["dimensions"]) == set(shape["Dimensions"][0]), (title, target["metricName"])


def test_the_dashboard_is_a_grafana_import() -> None:
    dashboard = json.loads(grafana.OUTPUT.read_text())
    assert dashboard["uid"] == "gpuwarden"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "cloudwatch"
    for title, target in targets(dashboard):
        assert target["datasource"] == "${datasource}", title
        assert target["region"] == "${region}", title
        assert target["dimensions"]["service"] == "${service}", title
