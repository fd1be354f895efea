"""No secret is ever logged: an EKS bearer token and AWS secret values never reach a log line or a result."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.adapters.kubeconfig import client_from_kubeconfig
from gpuwarden.adapters.ledger import MemoryLedger
from gpuwarden.config import Settings
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.wiring import build_deps
from tests.reliability.harness import build_cluster, fresh_sim, spot_event

TOKEN = "k8s-aws-v1.aHR0cHM6Ly9zdHMudXMtd2VzdC0yLmFtYXpvbmF3cy5jb20vP0FjdGlvbj1HZXRDYWxsZXJJZGVudGl0eSZTRUNSRVQ"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSECRETKEY"
SESSION = "IQoJb3JpZ2luX2VjEXAMPLESESSIONTOKENSECRET"


def test_tokens_and_secret_values_never_appear_in_logs_or_results(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    monkeypatch.setenv("AWS_SESSION_TOKEN", SESSION)
    monkeypatch.setenv("POWERTOOLS_LOG_LEVEL", "DEBUG")
    with fresh_sim(speed=40.0, ack_delay=0.5) as (sim, _workloads):
        build_cluster(sim, grace=1)
        kubeconfig = sim.kubeconfig()
        kubeconfig["users"][0]["user"]["token"] = TOKEN
        path = tmp_path / "kubeconfig"
        path.write_text(json.dumps(kubeconfig))
        deps = build_deps(
            Settings(region="us-west-2", cluster="ml-prod", kubeconfig=str(path)),
            caller="secrets",
            api_client=client_from_kubeconfig(str(path)),
            ledger=MemoryLedger(),
            policy=Policy(cluster="ml-prod"),
        )
        deps.clock = sim.clock.now
        deps.sleep = lambda seconds: time.sleep(seconds / 40)
        sim.faults.inject(status=503, method="PATCH", count=2)  # retries log their errors too
        from gpuwarden.observability import logger

        buffer = io.StringIO()
        handler: Any = logger.registered_handler
        previous = handler.setStream(buffer)
        logger.setLevel("DEBUG")
        try:
            result = handle_batch(parse_notices(spot_event(sim.clock.now(), age=100)), deps).to_json()
        finally:
            logger.setLevel("INFO")
            handler.setStream(previous)
    out = capsys.readouterr()
    text = buffer.getvalue() + out.out + out.err + json.dumps(result)
    assert result["outcome"] == "handled"
    assert '"message":"cordon"' in text.replace(" ", "")  # the logs were captured
    for secret in (TOKEN, TOKEN.removeprefix("k8s-aws-v1."), SECRET_KEY, SESSION):
        assert secret not in text
