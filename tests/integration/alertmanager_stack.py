"""Real Prometheus and Alertmanager (Debian's packages) publishing to moto's SNS, for the tests that
capture what Alertmanager really sends: a dcgm-exporter stand-in's server, moto on loopback, an SQS
subscription that keeps the SNS envelopes, and each envelope as the Lambda SNS event gpuwarden
receives. The waits are bounded; nothing here is timed."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
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

DOCS = Path(__file__).resolve().parents[2] / "docs" / "gpu-signals.md"


INSTALL = "apt-get install prometheus prometheus-alertmanager (Debian bookworm), or `make setup` as root"


def _binaries() -> tuple[str, str]:
    prometheus, alertmanager = shutil.which("prometheus"), shutil.which("prometheus-alertmanager")
    if prometheus and alertmanager:
        return prometheus, alertmanager
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"prometheus / prometheus-alertmanager missing under CI: {INSTALL}")
    pytest.skip(f"prometheus / prometheus-alertmanager not installed: {INSTALL}")


def json_template() -> str:
    """AWS's JSON template for Lambda consumers, exactly as docs/gpu-signals.md shows it."""
    text = DOCS.read_text()
    start = text.index('{{ define "sns.default.message" }}{"receiver"')
    return text[start : text.index("\n", start)]


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
def moto_endpoint() -> Iterator[str]:
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.get_host_and_port()[1]}"
    finally:
        server.stop()


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
