"""Spot interruptions under random fault schedules: the invariants hold whatever the API does.

Each example builds a fresh simulator (40x clock) with a Spot GPU node, injects a schedule of
faults (5xx, 409 on RV-checked PATCHes, 429 throttling with Retry-After, PDB 429s on evictions,
dropped connections, latency spikes, EC2/ASG throttling), runs the real services, and checks:

* the node ends cordoned + tainted and drained, or the result says why (drain outcome, reason);
  a run that failed (raised, or answered `failed`: the handler raises it) is delivered again, up to
  twice, as Lambda retries an asynchronous invocation; the invariants judge the last answer;
* no pod outside the node, and no DaemonSet or mirror pod, was written or addressed;
* at most one replacement (NodeClaims / ASG desired capacity);
* every opted-in pod had `checkpoint-requested` written before it was evicted or deleted;
* no delete (as opposed to an eviction) before the pod's `deadline - grace`;
* the run ends before the deadline, or reports that it did not.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuwarden.adapters.ledger import MemoryLedger
from gpuwarden.domain.decide import STALE_AFTER
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from sim import KubeSim
from sim.apiserver.faults import RequestInfo
from tests import replay
from tests.reliability.conftest import sim_deps
from tests.reliability.harness import (
    Observer,
    build_cluster,
    check_checkpoint_before_removal,
    check_drained_or_reported,
    check_ends_in_time,
    check_involuntary_deletes,
    check_untouched,
    deadline_of,
    fresh_sim,
    snapshot,
    spot_event,
)

#: (method, path regex) of the calls the Spot path makes
TARGETS: dict[str, tuple[str | None, str | None]] = {
    "node-get": ("GET", r"/api/v1/nodes/.+"),
    "node-list": ("GET", r"/api/v1/nodes"),
    "node-patch": ("PATCH", r"/api/v1/nodes/.+"),
    "pod-list": ("GET", r"/api/v1/pods"),
    "pod-get": ("GET", r"/api/v1/namespaces/[^/]+/pods/[^/]+"),
    "pod-patch": ("PATCH", r"/api/v1/namespaces/[^/]+/pods/[^/]+"),
    "eviction": ("POST", r"/api/v1/namespaces/[^/]+/pods/[^/]+/eviction"),
    "pod-delete": ("DELETE", r"/api/v1/namespaces/[^/]+/pods/[^/]+"),
    "nodepool-get": ("GET", r"/apis/karpenter\.sh/v1/nodepools/.+"),
    "nodeclaim-create": ("POST", r"/apis/karpenter\.sh/v1/nodeclaims"),
    "event-create": ("POST", r"/api/v1/namespaces/default/events"),
    "any-write": (None, None),
}
PDB_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass(frozen=True)
class FaultSpec:
    what: str  # 5xx | conflict | throttle | pdb | reset | latency
    target: str
    count: int
    skip: int  # let this many matching requests through first
    status: int = 0
    latency: float = 0.0
    retry_after: int = 1


@st.composite
def fault_specs(draw: Any) -> FaultSpec:
    what = draw(st.sampled_from(["5xx", "5xx", "conflict", "throttle", "pdb", "reset", "latency", "latency"]))
    count = draw(st.integers(1, 3))
    skip = draw(st.integers(0, 6))
    if what == "conflict":
        return FaultSpec(what, draw(st.sampled_from(["node-patch", "pod-patch"])), count, skip, status=409)
    if what == "pdb":
        return FaultSpec(what, "eviction", count, skip, status=429, retry_after=0)
    if what == "latency":
        # mostly small; one in ten a spike of up to 2 s (80 sim seconds at 40x)
        spike = draw(st.integers(0, 9)) == 0
        seconds = draw(st.floats(0.15, 2.0) if spike else st.floats(0.005, 0.15))
        return FaultSpec(what, draw(st.sampled_from(sorted(TARGETS))), 1, skip, latency=seconds)
    target = draw(st.sampled_from(sorted(TARGETS)))
    if what == "throttle":
        return FaultSpec(what, target, 1, skip, status=429, retry_after=draw(st.sampled_from([0, 0, 1])))
    if what == "reset":
        return FaultSpec(what, target, count, skip)
    return FaultSpec(what, target, count, skip, status=draw(st.sampled_from([500, 503])))


@st.composite
def schedules(draw: Any) -> dict[str, Any]:
    pdb_min = draw(st.sampled_from([1, 1, None, "100%"]))
    age = draw(st.integers(0, 110))
    if pdb_min == "100%":
        age = max(age, 95)  # a PDB that never allows: the drain waits for deadline - grace
    return {
        "faults": draw(st.lists(fault_specs(), max_size=6)),
        "modes": tuple(
            draw(st.lists(st.sampled_from(["signal:SIGUSR1", "exec:/bin/checkpoint --now", "annotate"]), max_size=3))
        ),
        "inference": draw(st.integers(0, 2)),
        "pdb_min": pdb_min,
        "grace": draw(st.integers(1, 10)),
        "age": age,
        "karpenter": draw(st.booleans()),
        "aws_throttles": draw(st.integers(0, 1)),
    }


def _inject(sim: KubeSim, spec: FaultSpec) -> None:
    method, path = TARGETS[spec.target]
    seen = itertools.count()

    def predicate(req: RequestInfo) -> bool:
        if method is None and req.method == "GET":
            return False
        if spec.what == "conflict":
            body = req.body or b""
            if b'"resourceVersion"' not in body:  # the real API never answers 409 to an unconditional patch
                return False
        return next(seen) >= spec.skip

    kwargs: dict[str, Any] = {"method": method, "path": path, "count": spec.count, "predicate": predicate}
    if spec.what == "reset":
        sim.faults.inject(reset=True, **kwargs)
    elif spec.what == "latency":
        sim.faults.inject(latency=spec.latency, **kwargs)
    elif spec.what == "pdb":
        # as kube-apiserver's eviction handler answers (pkg/registry/core/pod/storage/eviction.go)
        cause = {"reason": "DisruptionBudget", "message": "The disruption budget inference needs 2 healthy pods"}
        sim.faults.inject(status=429, message=PDB_MESSAGE, retry_after=spec.retry_after, causes=(cause,), **kwargs)
    elif spec.what == "throttle":
        sim.faults.inject(
            status=429, message="Too many requests, please try again later.", retry_after=spec.retry_after, **kwargs
        )
    else:
        sim.faults.inject(status=spec.status, **kwargs)


# ----------------------------------------------------------------------------- AWS side


class AwsThrottle:
    """Throttling answers from EC2 / Auto Scaling, through botocore's real retry path."""

    BODY = (
        b"<ErrorResponse><Error><Type>Sender</Type><Code>Throttling</Code>"
        b"<Message>Rate exceeded</Message></Error><RequestId>r</RequestId></ErrorResponse>"
    )

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.sent = 0

    def __call__(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        if self.sent >= self.budget:
            return None
        self.sent += 1

        class Raw:
            def stream(self, **__: Any) -> Any:
                yield AwsThrottle.BODY

        return AWSResponse(request.url, 400, {}, Raw())

    def install(self, cloud: Any) -> None:
        cloud.autoscaling.meta.events.register_first("before-send.auto-scaling.SetDesiredCapacity", self)
        cloud.ec2.meta.events.register_first("before-send.ec2.DescribeInstances", self)


_groups = itertools.count()


def _asg_instance() -> tuple[str, str]:
    """A fresh Auto Scaling group of one GPU instance in moto: (group, instance id)."""
    import boto3

    ec2 = boto3.client("ec2", region_name="us-west-2")
    if not ec2.describe_launch_templates(Filters=[{"Name": "launch-template-name", "Values": ["gpu-lt"]}])[
        "LaunchTemplates"
    ]:
        ec2.create_launch_template(
            LaunchTemplateName="gpu-lt", LaunchTemplateData={"ImageId": "ami-12c6146b", "InstanceType": "p4d.24xlarge"}
        )
    group = f"gpu-nodes-{next(_groups)}"
    asg = boto3.client("autoscaling", region_name="us-west-2")
    asg.create_auto_scaling_group(
        AutoScalingGroupName=group,
        LaunchTemplate={"LaunchTemplateName": "gpu-lt"},
        MinSize=0,
        MaxSize=3,
        DesiredCapacity=1,
        AvailabilityZones=["us-west-2a"],
    )
    found = asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]
    return group, found["Instances"][0]["InstanceId"]


def _desired(group: str) -> int:
    import boto3

    asg = boto3.client("autoscaling", region_name="us-west-2")
    return int(
        asg.describe_auto_scaling_groups(AutoScalingGroupNames=[group])["AutoScalingGroups"][0]["DesiredCapacity"]
    )


# ----------------------------------------------------------------------------- the property

STATS = {"schedules": 0, "faults": 0, "faults_hit": 0, "redeliveries": 0, "stale": 0}
#: Lambda retries a failed asynchronous invocation twice (EventBridge's target invokes it so)
ASYNC_RETRIES = 2


def deliver_as_lambda(sim: KubeSim, event: dict[str, Any], deps: Any, ledger: MemoryLedger) -> dict[str, Any]:
    """One EventBridge delivery to the deployed function: a failed invocation (a raise, or a failed
    answer, which the handler raises as `HandlingFailed`) is retried by Lambda up to twice, a minute
    or more later, when the burst of faults that failed it is over (the rest are removed)."""
    for attempt in range(ASYNC_RETRIES + 1):
        try:
            result = handle_batch(parse_notices(event), deps).to_json()
        except GpuwardenError as err:
            result = {"outcome": "failed", "kind": "spot-interruption", "node": None, "reason": str(err)}
        if result["outcome"] != "failed" or attempt == ASYNC_RETRIES:
            return result
        STATS["redeliveries"] += 1
        for fault in sim.faults.active[1:]:
            fault.remove()
        deps = sim_deps(sim, ledger)  # a new invocation (maybe a new execution environment)
    raise AssertionError("unreachable")


def run_schedule(schedule: dict[str, Any]) -> dict[str, Any]:
    """One schedule through the real services; the event's ledger entry once the invariants held."""
    with fresh_sim(speed=40.0) as (sim, _workloads):
        group, instance = ("", "i-0abc1234def567890") if schedule["karpenter"] else _asg_instance()
        cluster = build_cluster(
            sim,
            modes=schedule["modes"],
            inference=schedule["inference"],
            pdb_min_available=schedule["pdb_min"],
            grace=schedule["grace"],
            karpenter=schedule["karpenter"],
            instance_id=instance,
        )
        observer = Observer(sim)
        before = snapshot(sim, [*cluster.elsewhere, *cluster.must_stay])
        ledger = MemoryLedger()
        deps = sim_deps(sim, ledger)
        if not schedule["karpenter"]:
            AwsThrottle(schedule["aws_throttles"]).install(deps.cloud)
        event = spot_event(sim.clock.now(), age=schedule["age"], instance=instance)
        deadline = deadline_of(event)
        # the last example run is hypothesis's shrunk failure: these replay it (tests/replay.py)
        replay.note(schedule=schedule, event_id=event["id"], instance=instance, deadline=deadline.isoformat())
        for spec in schedule["faults"]:
            _inject(sim, spec)
        result = deliver_as_lambda(sim, event, deps, ledger)
        replay.note(result=result, faults_hit=[f.hits for f in sim.faults.active[1:]])
        STATS["schedules"] += 1
        STATS["faults"] += len(schedule["faults"])
        STATS["faults_hit"] += sum(f.hits for f in sim.faults.active[1:])

        if result["outcome"] == "ignored" and sim.clock.now() - deadline > STALE_AFTER:
            # The simulator's clock runs 40x: on a machine slow enough (load 16 on 2 cores), the
            # warning was more than STALE_AFTER past its deadline when the guard read the clock, and
            # the stale guard rightly wrote nothing. Not a finding about gpuwarden: counted, checked.
            STATS["stale"] += 1
            assert observer.taint_writes(cluster.node) == [], result
            return {}
        check_drained_or_reported(sim, cluster, result)
        check_untouched(sim, observer, cluster, before)
        check_checkpoint_before_removal(observer, cluster, result.get("actions", []))
        check_involuntary_deletes(observer, cluster, deadline, schedule["grace"])
        check_ends_in_time(result, deadline)
        assert len(observer.taint_writes(cluster.node)) == 1
        if schedule["karpenter"]:
            assert len(sim.list("NodeClaim")) <= 1
        else:
            assert _desired(group) <= 2
        entry = ledger.get(event["id"])
        assert entry is not None
        # the answer that finished the work is the event's record (a failed delivery before it is history)
        assert entry["outcome"] == "handled", entry
        return entry


SCHEDULE_SETTINGS: Callable[[Any], Any] = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)


@SCHEDULE_SETTINGS
@given(schedule=schedules())
def test_spot_interruption_keeps_its_invariants_under_random_faults(aws: None, schedule: dict[str, Any]) -> None:
    run_schedule(schedule)


#: What a random run (GPUWARDEN_TEST_SEED=1433369201, not CI's derandomized profile) shrank to: the
#: deletes at the deadline answer 500 six times in a row (two overlapping faults), past the client's
#: attempts, after the cordon and evictions were done. The answer used to be failed, finished by
#: Lambda's retry (first as a `duplicate` over the `failed` record, then `handled` with the failure
#: as history). Since issue 34 the node is marked by then, so the failure never leaves the
#: invocation: it is handed on to the drain workflow's rounds (`handed-on` when it met the first
#: rounds, the workflow's retry when it met a later one) and the first answer is `handled`.
#: tests/integration/test_ledger_outcomes.py keeps the redelivery after a failure (a 403 after the mark).
SEED_1433369201: dict[str, Any] = {
    "faults": [
        FaultSpec("5xx", "pod-delete", count=3, skip=1, status=500),
        FaultSpec("5xx", "any-write", count=1, skip=0, status=500),
        FaultSpec("5xx", "pod-delete", count=3, skip=1, status=500),
        FaultSpec("5xx", "any-write", count=1, skip=0, status=500),
        FaultSpec("5xx", "any-write", count=1, skip=0, status=500),
        FaultSpec("5xx", "any-write", count=1, skip=0, status=500),
    ],
    "modes": (),
    "inference": 2,
    "pdb_min": "100%",
    "grace": 1,
    "age": 95,
    "karpenter": False,
    "aws_throttles": 0,
}


def test_seed_1433369201_failed_deletes_after_the_mark_are_handed_on_not_redelivered(aws: None) -> None:
    before, hit = STATS["redeliveries"], STATS["faults_hit"]
    entry = run_schedule(SEED_1433369201)  # the invariants, and the ledger's `handled`, are checked inside
    assert STATS["faults_hit"] > hit  # the deletes met the 500s
    assert STATS["redeliveries"] == before  # and no Lambda retry was needed to finish
    assert "history" not in entry, entry
    assert "DELETE" in entry.get("handed_on", "DELETE"), entry


@pytest.mark.long
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)
@given(schedule=schedules())
def test_spot_interruption_keeps_its_invariants_under_random_faults_long(aws: None, schedule: dict[str, Any]) -> None:
    run_schedule(schedule)


@pytest.fixture(scope="module", autouse=True)
def _report() -> Any:
    yield
    if STATS["schedules"]:
        print(f"\nfault schedules: {STATS}")  # shown with -s; docs/reliability.md quotes a run
