"""Per-GPU alerts from real Prometheus and Alertmanager (Debian's 2.42 / 0.25) → moto's SNS → the
domain's coverage rule (docs/gpu-signals.md, "One alert per GPU").

The seed's rule as written, ``avg_over_time(DCGM_FI_DEV_GPU_UTIL[30m]) < 10`` (only its ``for:``
shortened from 1h to 2 s: the expression is the seed's, and over a fresh series its 30-minute
average is the average of the samples there are), over a dcgm-exporter stand-in with its label
set (``gpu``, ``UUID``, ``device``, ``Hostname`` …) for two nodes: an 8-GPU node whose GPUs 0-1
serve Triton (85 %) and 2-7 idle, and a 2-GPU node idle on both. Beside it the rule aggregated by
node (``max by (Hostname)``: every GPU of the node below the threshold). Alertmanager routes with
``group_by: [alertname, Hostname]`` and AWS's JSON template, so each notification is one node's
alerts. Each envelope, as the Lambda receives it, is parsed and planned: the busy node's six idle
GPUs are not its eight and it is ignored, naming the count; the idle node's two are; the
aggregated alert covers its node. ``GPUWARDEN_KEEP_ENVELOPES=<dir>`` writes the Lambda events
(events/alertmanager-sns-per-gpu-*.json and -by-node.json came from it). Loopback only; the wait
for Alertmanager's messages is bounded (60 s), the test is not timed.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from gpuwarden.domain.alerts import coverage_refusal
from gpuwarden.domain.notice import Notice
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.sources import AlertBatch
from tests.alert_policy import ALERTS_POLICY, planned
from tests.integration.alertmanager_stack import (
    json_template,
    kept_topic,
    lambda_event,
    metrics_server,
    moto_endpoint,
    published,
)

__all__ = ["moto_endpoint"]

BUSY = "ip-10-0-1-23.us-west-2.compute.internal"
IDLE = "ip-10-0-2-40.us-west-2.compute.internal"
GPUS = {BUSY: 8, IDLE: 2}

_LABELS = (
    'gpu="{gpu}",UUID="GPU-{uuid}",pci_bus_id="00000000:{bus:02X}:00.0",device="nvidia{gpu}",'
    'modelName="NVIDIA A100-SXM4-80GB",Hostname="{host}",DCGM_FI_DRIVER_VERSION="535.183.01",'
    'container="",namespace="",pod=""'
)


def dcgm_metrics() -> str:
    """dcgm-exporter's /metrics for GPU utilisation: one series per GPU."""
    lines = ["# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).", "# TYPE DCGM_FI_DEV_GPU_UTIL gauge"]
    for n, (host, count) in enumerate(GPUS.items()):
        for gpu in range(count):
            util = 85 if host == BUSY and gpu < 2 else gpu % 3
            uuid = f"{n:02d}{gpu:02d}a1b2-c3d4-e5f6-0718-29304a5b6c7d"
            lines.append(
                f"DCGM_FI_DEV_GPU_UTIL{{{_LABELS.format(gpu=gpu, uuid=uuid, bus=16 + gpu, host=host)}}} {util}"
            )
    return "\n".join(lines) + "\n"


RULES = {
    "groups": [
        {
            "name": "gpu-idle",
            "interval": "1s",
            "rules": [
                {"alert": "LowGPUUtilization", "expr": "avg_over_time(DCGM_FI_DEV_GPU_UTIL[30m]) < 10", "for": "2s"},
                {
                    "alert": "LowGPUUtilizationByNode",
                    "expr": "max by (Hostname) (avg_over_time(DCGM_FI_DEV_GPU_UTIL[30m])) < 10",
                    "for": "2s",
                },
            ],
        }
    ]
}


def _configs(tmp_path: Path, moto: str, topic: str) -> None:
    sigv4 = {"region": "us-west-2", "access_key": "testing", "secret_key": "testing"}
    sns = {
        "api_url": moto,
        "topic_arn": topic,
        "sigv4": sigv4,
        "message": '{{ template "gpuwarden.json" . }}',
        "subject": "[{{ .Status | toUpper }}] {{ .GroupLabels.alertname }}",
    }
    route = {
        "receiver": "gpuwarden",
        "group_by": ["alertname", "Hostname"],
        "group_wait": "1s",
        "group_interval": "1s",
        "repeat_interval": "1h",
    }
    am = {"route": route, "receivers": [{"name": "gpuwarden", "sns_configs": [sns]}]}
    am["templates"] = [str(tmp_path / "gpuwarden.tmpl")]
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(am))
    (tmp_path / "gpuwarden.tmpl").write_text(json_template().replace("sns.default.message", "gpuwarden.json", 1))
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(RULES))


def _capture(tmp_path: Path, moto: str) -> tuple[list[dict[str, Any]], str]:
    kept = kept_topic(moto)
    _configs(tmp_path, moto, kept.topic)
    with metrics_server(dcgm_metrics().encode()) as exporter:
        return published(tmp_path, exporter, kept, want=3, timeout=60), kept.subscription


def _name(batch: AlertBatch) -> str:
    alerts = batch.alerts
    if alerts[0].name.endswith("ByNode"):
        return "by-node"
    return "per-gpu-partial" if alerts[0].labels.get("Hostname") == BUSY else "per-gpu-whole-node"


def test_real_per_gpu_alerts_make_a_node_idle_only_when_they_cover_every_gpu(
    tmp_path: Path, moto_endpoint: str
) -> None:
    # Given real Prometheus and Alertmanager: the seed's rule, its variant by node, group_by [alertname, Hostname]
    envelopes, subscription = _capture(tmp_path, moto_endpoint)
    keep = os.environ.get("GPUWARDEN_KEEP_ENVELOPES")  # a directory: the Lambda events, to refresh events/
    answers: dict[str, tuple[AlertBatch, Notice]] = {}
    for envelope in envelopes:
        event = lambda_event(envelope, subscription)
        batch = parse_event(event)
        assert isinstance(batch, AlertBatch)
        if keep:
            (Path(keep) / f"alertmanager-sns-{_name(batch)}.json").write_text(json.dumps(event, indent=2) + "\n")
        # When each notification is planned, as the GPU function receives it
        answers[_name(batch)] = (batch, planned(batch))

    # Then one notification per node: the busy node's carries its six idle GPUs, one alert each
    partial, notice = answers["per-gpu-partial"]
    assert sorted(a.labels["gpu"] for a in partial.alerts) == ["2", "3", "4", "5", "6", "7"]
    assert {a.labels["Hostname"] for a in partial.alerts} == {BUSY}
    # and, given that node's 8 accelerators, it is not idle, the count named
    why = coverage_refusal(notice, GPUS[BUSY])
    assert why is not None
    assert "cover 6 of the 8 GPUs" in why
    # the idle node's two alerts cover its two GPUs; the aggregated alert covers its node
    whole_batch, whole = answers["per-gpu-whole-node"]
    assert len(whole_batch.alerts) == 2
    assert coverage_refusal(whole, GPUS[IDLE]) is None
    by_node_batch, by_node = answers["by-node"]
    assert set(by_node_batch.alerts[0].labels) == {"alertname", "Hostname"}
    assert by_node.detail["covers_node"] is True
    assert coverage_refusal(by_node, GPUS[IDLE]) is None
    assert ALERTS_POLICY.alerts["LowGPUUtilizationByNode"] == "gpu-idle"
