"""Reliability fixtures: AWS test credentials for the module, moto once per module, deps on a simulator."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from gpuwarden.domain.policy import Policy
from gpuwarden.services.engine.context import Deps
from sim import KubeSim, wiring

AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-west-2",
    "AWS_REGION": "us-west-2",
    "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenTest",
}


@contextmanager
def moto_environment() -> Iterator[None]:
    """The test credentials and region (`AWS_ENV`), and nothing that points elsewhere: no endpoint,
    profile, kubeconfig, state table or dry run from the shell that runs the tests."""
    with pytest.MonkeyPatch.context() as mp:
        for key, value in AWS_ENV.items():
            mp.setenv(key, value)
        for key in ("AWS_ENDPOINT_URL", "AWS_PROFILE", "KUBECONFIG", "GPUWARDEN_STATE_TABLE", "DRY_RUN"):
            mp.delenv(key, raising=False)
        yield


@pytest.fixture(scope="module", autouse=True)
def _aws_env() -> Iterator[None]:
    # module scope: hypothesis tests must not depend on function-scoped fixtures
    with moto_environment():
        yield


@pytest.fixture(scope="module")
def aws() -> Iterator[None]:
    from moto import mock_aws

    with mock_aws():
        import boto3

        # made now, not inside a scenario's deadline: a Spot warning asks EC2 first (its first
        # call costs moto seconds of real time; tests/integration/conftest.py `world`)
        boto3.client("ec2", region_name="us-west-2").describe_instances()
        yield


def sim_deps(sim: KubeSim, ledger: Any = None, policy: Policy | None = None) -> Deps:
    """The real adapters on the simulator, with its clock (as tests/integration's World does)."""
    return wiring.sim_deps(sim, caller="reliability", policy=policy, ledger=ledger)


def clean_env() -> dict[str, str]:
    """The environment for a `gpuwarden` subprocess: test credentials, no user config."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "GPUWARDEN_", "KUBECONFIG", "DRY_RUN"))}
    env.update(AWS_ENV)
    return env


TABLE = "gpuwarden-state"


_WRITE_LOCK = threading.Lock()


def _atomic_dynamodb_writes() -> None:
    """Make the emulator's item writes atomic, as DynamoDB's are (one item, one writer at a time).

    moto 5's `update_item` reads the item, creates it if missing, and applies the expression in
    place with no lock: under concurrent requests from separate processes an `ADD` can be lost
    (seen once in 100 concurrent duplicate deliveries). The witness must behave like the real
    service, so its writes are serialized here (moto's server runs in this process).
    """
    from moto.dynamodb.models import DynamoDBBackend

    for name in ("update_item", "put_item", "delete_item"):
        original = getattr(DynamoDBBackend, name)
        if getattr(original, "_gpuwarden_atomic", False):
            continue

        def locked(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            with _WRITE_LOCK:
                return _original(self, *args, **kwargs)

        locked._gpuwarden_atomic = True  # type: ignore[attr-defined]
        setattr(DynamoDBBackend, name, locked)


@pytest.fixture(scope="module")
def moto_server() -> Iterator[str]:
    """A moto server shared with `gpuwarden` subprocesses (separate Lambda instances), with the state table."""
    import boto3
    from moto.server import ThreadedMotoServer

    _atomic_dynamodb_writes()
    server = ThreadedMotoServer(port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    url = f"http://{host}:{port}"
    dynamodb = boto3.client("dynamodb", region_name="us-west-2", endpoint_url=url)
    if TABLE in dynamodb.list_tables()["TableNames"]:  # moto's backend is per process: a module before made it
        dynamodb.delete_table(TableName=TABLE)
    dynamodb.create_table(
        TableName=TABLE,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    try:
        yield url
    finally:
        server.stop()


def ledger_item(moto_url: str, event_id: str) -> dict[str, Any] | None:
    import boto3

    client = boto3.client("dynamodb", region_name="us-west-2", endpoint_url=moto_url)
    item = client.get_item(TableName=TABLE, Key={"pk": {"S": f"event#{event_id}"}, "sk": {"S": "ledger"}}).get("Item")
    if not item:
        return None
    return {k: next(iter(v.values())) for k, v in item.items()}


def invoke_env(sim: KubeSim, moto_url: str, **extra: str) -> dict[str, str]:
    env = clean_env()
    env.update(
        KUBECONFIG=str(sim.kubeconfig_path),
        AWS_ENDPOINT_URL=moto_url,
        GPUWARDEN_STATE_TABLE=TABLE,
        GPUWARDEN_CLUSTER="ml-prod",
        PYTHONDONTWRITEBYTECODE="1",
        **extra,
    )
    return env
