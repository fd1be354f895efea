"""Real Prometheus and Alertmanager (Debian's 2.42 / 0.25) → moto's SNS → `gpuwarden invoke`.

A dcgm-exporter stand-in serves its text format and label set; Prometheus scrapes it every second
and evaluates the seed's idle rule and the XID rule of docs/gpu-signals.md with shortened windows;
Alertmanager publishes each group to moto's SNS over SigV4 (`sns_configs` with `api_url` and
`sigv4`), one receiver with AWS's JSON template, one with Alertmanager's default text. An SQS
subscription keeps the envelopes; each becomes the Lambda SNS event the GPU function receives and
goes through `gpuwarden invoke`. No alert payload here is written by hand. Loopback only.
Windows are seconds (scrape and evaluation 1 s, `for: 2s`, group_wait 1 s): ~15 s on an idle
machine; the wait for Alertmanager's messages is bounded (40 s), the test is not timed.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from gpuwarden.domain.gpu_health import FATAL_XIDS
from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.builders import gpu_node, nodepool
from tests.integration.alertmanager_stack import (
    json_template,
    kept_topic,
    lambda_event,
    metrics_server,
    moto_endpoint,
    published,
)
from tests.integration.cli_subprocess import GPUWARDEN, invoke_env

__all__ = ["moto_endpoint"]

IDLE_NODE = "ip-10-0-1-23.us-west-2.compute.internal"
BROKEN_NODE = "ip-10-0-2-40.us-west-2.compute.internal"


# --------------------------------------------------------------------------- dcgm-exporter stand-in

_LABELS = (
    'gpu="{gpu}",UUID="GPU-{uuid}",pci_bus_id="00000000:{bus:02X}:1C.0",device="nvidia{gpu}",'
    'modelName="NVIDIA A100-SXM4-40GB",Hostname="{host}",DCGM_FI_DRIVER_VERSION="535.183.01",'
    'container="",namespace="",pod=""'
)


def dcgm_metrics() -> str:
    """dcgm-exporter's /metrics (its default counters file): GPU utilisation and the last XID."""
    lines = [
        "# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).",
        "# TYPE DCGM_FI_DEV_GPU_UTIL gauge",
    ]
    idle = [(IDLE_NODE, g, 0, 0) for g in range(2)]
    series = idle + [(BROKEN_NODE, g, 93, 79 if g == 1 else 0) for g in range(2)]
    for host, gpu, util, _ in series:
        labels = _LABELS.format(gpu=gpu, uuid=f"{abs(hash((host, gpu))) % 10**8:08d}-aaaa", bus=16 + gpu, host=host)
        lines.append(f"DCGM_FI_DEV_GPU_UTIL{{{labels}}} {util}")
    lines += [
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.",
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge",
    ]
    for host, gpu, _, xid in series:
        labels = _LABELS.format(gpu=gpu, uuid=f"{abs(hash((host, gpu))) % 10**8:08d}-aaaa", bus=16 + gpu, host=host)
        lines.append(f"DCGM_FI_DEV_XID_ERRORS{{{labels}}} {xid}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def exporter() -> Iterator[str]:
    with metrics_server(dcgm_metrics().encode()) as address:
        yield address


# --------------------------------------------------------------------------- the rules (windows shortened)

# docs/gpu-signals.md's "replace" rule: the XIDs the EKS node monitoring agent treats as fatal
FATAL = " or ".join(f"DCGM_FI_DEV_XID_ERRORS == {c}" for c in FATAL_XIDS)
RULES = {
    "groups": [
        {
            "name": "gpu",
            "interval": "1s",
            "rules": [
                # the seed's rule, avg_over_time(...[30m]) < 10 for 1h, shortened
                {"alert": "LowGPUUtilization", "expr": "avg_over_time(DCGM_FI_DEV_GPU_UTIL[5s]) < 10", "for": "2s"},
                {"alert": "GPUXidError", "expr": FATAL, "for": "0s", "labels": {"severity": "critical"}},
            ],
        }
    ]
}


def test_a_real_alertmanager_notification_reaches_invoke_as_the_lambda_receives_it(
    tmp_path: Path, exporter: str, moto_endpoint: str
) -> None:
    # Given moto's SNS topic with an SQS subscription that keeps the envelopes
    kept = kept_topic(moto_endpoint)
    topic, subscription = kept.topic, kept.subscription

    # And Alertmanager publishing over SigV4: the idle alert with AWS's JSON template, the XID alert as default text
    sigv4 = {"region": "us-west-2", "access_key": "testing", "secret_key": "testing"}
    # SNS refuses a Subject of 100 characters or more; Alertmanager's default subject lists the common labels
    subject = "[{{ .Status | toUpper }}] {{ .GroupLabels.alertname }}"
    (tmp_path / "alertmanager.yml").write_text(
        yaml.safe_dump(
            {
                "route": {
                    "receiver": "text",
                    "group_by": ["alertname"],
                    "group_wait": "1s",
                    "group_interval": "1s",
                    "repeat_interval": "1h",
                    "routes": [{"receiver": "json", "matchers": ['alertname="LowGPUUtilization"']}],
                },
                "receivers": [
                    {
                        "name": "json",
                        "sns_configs": [
                            {
                                "api_url": moto_endpoint,
                                "topic_arn": topic,
                                "sigv4": sigv4,
                                "message": '{{ template "gpuwarden.json" . }}',
                                "subject": subject,
                            }
                        ],
                    },
                    {
                        "name": "text",
                        "sns_configs": [
                            {"api_url": moto_endpoint, "topic_arn": topic, "sigv4": sigv4, "subject": subject}
                        ],
                    },
                ],
                "templates": [str(tmp_path / "gpuwarden.tmpl")],
            }
        )
    )
    # the JSON template under its own name: the text receiver keeps Alertmanager's default
    (tmp_path / "gpuwarden.tmpl").write_text(json_template().replace("sns.default.message", "gpuwarden.json", 1))
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(RULES))
    # When Prometheus fires both alerts and Alertmanager publishes them
    envelopes = published(tmp_path, exporter, kept, want=2, timeout=40)

    # Then each, as the Lambda receives it, goes through `gpuwarden invoke` on the cluster
    with KubeSim(clock_speed=1.0) as sim:
        Workloads(sim, delay=0.2).install()
        sim.create(nodepool("gpu-training"))
        # the idle node has the two GPUs the exporter serves for it: its two alerts cover it
        sim.create(gpu_node(IDLE_NODE, "i-0abc1234def567890", nodepool="gpu-training", ip="10.0.1.23", gpus=2))
        sim.create(gpu_node(BROKEN_NODE, "i-0fedcba9876543210", nodepool="gpu-training", ip="10.0.2.40"))
        for i in range(3):
            sim.create(
                gpu_node(f"ip-10-0-3-{i}.us-west-2.compute.internal", f"i-0aaaa{i:012x}", nodepool="gpu-training")
            )
        policy = tmp_path / "policy.yaml"
        policy.write_text(
            yaml.safe_dump(
                {"cluster": "ml-prod", "alerts": {"LowGPUUtilization": "gpu-idle", "GPUXidError": "gpu-unhealthy"}}
            )
        )
        env = invoke_env(sim, moto_endpoint) | {"GPUWARDEN_POLICY_FILE": str(policy)}
        answers = {}
        keep = os.environ.get("GPUWARDEN_KEEP_ENVELOPES")  # a directory: the Lambda events, to refresh events/
        for envelope in envelopes:
            event = json.dumps(lambda_event(envelope, subscription), indent=2)
            if keep:
                rendering = "json" if envelope["Message"].lstrip().startswith("{") else "text"
                (Path(keep) / f"alertmanager-sns-{rendering}.json").write_text(event + "\n")
            done = subprocess.run(
                [str(GPUWARDEN), "invoke", "-"], input=event, capture_output=True, text=True, env=env, timeout=60
            )
            assert done.returncode == 0, done.stderr
            answer = json.loads(done.stdout)
            answers[answer["kind"]] = (answer, envelope)

        # the XID alert (default text, per GPU: the node once): gpu-unhealthy, the node cordoned for it
        unhealthy, text = answers["gpu-unhealthy"]
        assert text["Message"].lstrip().startswith("Alerts Firing:") or "Alerts Firing:" in text["Message"]
        assert unhealthy["outcome"] == "handled", unhealthy
        assert unhealthy["node"] == BROKEN_NODE
        broken = sim.get("Node", BROKEN_NODE)
        assert broken is not None
        assert broken["metadata"]["annotations"]["gpuwarden.io/kind"] == "gpu-unhealthy"
        # the idle alert (JSON template, Go times): gpu-idle, its own evidence (no CloudWatch re-check)
        idle, rendered = answers["gpu-idle"]
        assert json.loads(rendered["Message"])["alerts"][0]["startsAt"].endswith("+0000 UTC")
        assert idle["node"] == IDLE_NODE, idle
        assert idle["outcome"] == "handled", idle
        assert "utilization" not in idle["reason"]
