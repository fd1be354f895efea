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
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from threading import Thread
from typing import Any

import boto3
import pytest
import yaml

from gpuwarden.domain.gpu_health import FATAL_XIDS
from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.builders import gpu_node, nodepool
from tests.integration.test_cli_invoke import invoke_env

GPUWARDEN = Path(sys.executable).with_name("gpuwarden")
DOCS = Path(__file__).resolve().parents[2] / "docs" / "gpu-signals.md"
IDLE_NODE = "ip-10-0-1-23.us-west-2.compute.internal"
BROKEN_NODE = "ip-10-0-2-40.us-west-2.compute.internal"
INSTALL = "apt-get install prometheus prometheus-alertmanager (Debian bookworm), or `make setup` as root"


def _binaries() -> tuple[str, str]:
    prometheus, alertmanager = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
    if prometheus and alertmanager:
        return prometheus, alertmanager
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"prometheus / prometheus-alertmanager missing under CI: {INSTALL}")
    pytest.skip(f"prometheus / prometheus-alertmanager not installed: {INSTALL}")


def _json_template() -> str:
    """AWS's JSON template for Lambda consumers, exactly as docs/gpu-signals.md shows it."""
    text = DOCS.read_text()
    start = text.index('{{ define "sns.default.message" }}{"receiver"')
    return text[start : text.index("\n", start)]


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


@contextmanager
def metrics_server(body: bytes) -> Iterator[str]:
    """An exporter stand-in on loopback serving ``body`` in the text format; its address."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


@pytest.fixture
def exporter() -> Iterator[str]:
    with metrics_server(dcgm_metrics().encode()) as address:
        yield address


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    finally:
        server.stop()


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


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(args, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def _messages(sqs: Any, queue: str, want: int, timeout: float) -> list[dict[str, Any]]:
    bodies: list[dict[str, Any]] = []
    end = time.monotonic() + timeout
    while len(bodies) < want and time.monotonic() < end:
        got = sqs.receive_message(QueueUrl=queue, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        for message in got.get("Messages", []):
            bodies.append(json.loads(message["Body"]))
            sqs.delete_message(QueueUrl=queue, ReceiptHandle=message["ReceiptHandle"])
    return bodies


def lambda_event(envelope: dict[str, Any], subscription: str) -> dict[str, Any]:
    """The SNS envelope SQS kept → the Lambda SNS event (the same fields; Lambda spells two URL keys
    `SigningCertUrl` / `UnsubscribeUrl`)."""
    sns = {k: v for k, v in envelope.items() if k not in ("SigningCertURL", "UnsubscribeURL")}
    sns |= {"SigningCertUrl": envelope.get("SigningCertURL", ""), "UnsubscribeUrl": envelope.get("UnsubscribeURL", "")}
    return {
        "Records": [{"EventSource": "aws:sns", "EventVersion": "1.0", "EventSubscriptionArn": subscription, "Sns": sns}]
    }


@dataclass(frozen=True)
class KeptTopic:
    """moto's SNS topic with an SQS subscription that keeps the envelopes."""

    topic: str
    subscription: str
    sqs: Any
    queue: str


def kept_topic(moto: str) -> KeptTopic:
    aws = {"endpoint_url": moto, "region_name": "us-west-2"}
    aws |= {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    sns, sqs = boto3.client("sns", **aws), boto3.client("sqs", **aws)
    topic = sns.create_topic(Name="gpuwarden-alertmanager")["TopicArn"]
    queue = sqs.create_queue(QueueName="kept")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    subscription = sns.subscribe(TopicArn=topic, Protocol="sqs", Endpoint=queue_arn)["SubscriptionArn"]
    return KeptTopic(topic, subscription, sqs, queue)


def _listening(log: Path, process: subprocess.Popen[bytes], timeout: float = 20) -> str:
    """The address a Prometheus-project server bound (it was given port 0: no port race with
    whatever else runs on this machine); it logs ``msg="Listening on" address=…``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and process.poll() is None:
        found = re.search(r'msg="Listening on" address=(\S+)', log.read_text())
        if found:
            return found.group(1)
        time.sleep(0.1)
    raise AssertionError(f"{log.name}: not listening: {log.read_text()[-1500:]}")


def published(tmp_path: Path, exporter: str, kept: KeptTopic, want: int, timeout: float) -> list[dict[str, Any]]:
    """Run Alertmanager (``alertmanager.yml`` in ``tmp_path``), then Prometheus scraping ``exporter``
    every second with ``rules.yml`` and alerting it, until ``want`` envelopes are kept (bounded by
    ``timeout``); stop both and return them (the logs' tails in the failure when short)."""
    prometheus, alertmanager = _binaries()
    am = _start(
        [
            alertmanager,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am'}",
            "--web.listen-address=127.0.0.1:0",
            "--cluster.listen-address=",
        ],
        tmp_path / "alertmanager.log",
    )
    processes = [am]
    try:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(tmp_path / "rules.yml")],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [_listening(tmp_path / "alertmanager.log", am)]}]}]
            },
            "scrape_configs": [{"job_name": "dcgm-exporter", "static_configs": [{"targets": [exporter]}]}],
        }
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        processes.append(
            _start(
                [
                    prometheus,
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                    "--web.listen-address=127.0.0.1:0",
                    "--rules.alert.resend-delay=1s",
                ],
                tmp_path / "prometheus.log",
            )
        )
        envelopes = _messages(kept.sqs, kept.queue, want=want, timeout=timeout)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=10)
    logs = "\n".join((tmp_path / f).read_text()[-1500:] for f in ("alertmanager.log", "prometheus.log"))
    assert len(envelopes) == want, logs
    return envelopes


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
    (tmp_path / "gpuwarden.tmpl").write_text(_json_template().replace("sns.default.message", "gpuwarden.json", 1))
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
