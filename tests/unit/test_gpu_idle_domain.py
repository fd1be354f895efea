"""The gpu-idle guardrails (pure): each says why it stops a reclaim, or lets it go on."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.gpu_idle import (
    CLAIMED_AT,
    NODEGROUP_LABEL,
    Utilization,
    busy_refusal,
    cap_precheck,
    cap_refusal,
    claim_stamp,
    gpu_idle_holders,
    gpu_refusal,
    held_elsewhere,
    min_nodes_refusal,
    nodeclaim_for,
    pool_of,
    state_refusal,
    voluntary_in_progress,
)
from gpuwarden.domain.views import NODEPOOL_LABEL, NodeView
from gpuwarden.kinds.registry import VOLUNTARY

T0 = datetime(2026, 6, 1, 3, 42, tzinfo=UTC)


def node(
    name: str,
    *,
    pool: str | None = "gpu",
    gpus: int = 8,
    kind: str | None = None,
    claimed: datetime | None = None,
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
) -> NodeView:
    annotations: dict[str, str] = {}
    if kind:
        annotations |= {ann.EVENT_ID: f"ev-{name}", ann.KIND: kind}
    if claimed:
        annotations[CLAIMED_AT] = claim_stamp(claimed)
    all_labels = dict(labels or {})
    if pool:
        all_labels[NODEPOOL_LABEL] = pool
    return NodeView(
        name=name,
        resource_version="1",
        provider_id=f"aws:///us-west-2a/i-0{abs(hash(name)) % 10**16:016x}",
        labels=all_labels,
        annotations=annotations,
        unschedulable=unschedulable or kind is not None,
        gpu_capacity=gpus,
        allocatable={"nvidia.com/gpu": gpus} if gpus else {},
    )


@pytest.mark.parametrize("state", ["OK", "INSUFFICIENT_DATA", None])
def test_only_alarm_state_reclaims(state: str | None) -> None:
    # Given a state other than ALARM, When checked, Then it is refused with the state named
    reason = state_refusal(state)
    assert reason is not None
    assert (state or "unknown") in reason
    assert state_refusal("ALARM") is None


def test_node_without_gpus_is_refused() -> None:
    refused = gpu_refusal(node("cpu-1", gpus=0))
    assert refused is not None
    assert refused.startswith("node cpu-1 has no accelerator in its allocatable (nvidia.com/gpu, nvidia.com/mig-*")
    assert gpu_refusal(node("gpu-1")) is None


def test_a_trainium_or_mig_node_is_an_accelerator_node_for_gpu_idle() -> None:
    # Given nodes whose only accelerators are Neuron devices, or MIG slices (mixed strategy)
    trn = replace(node("trn-1", gpus=0), allocatable={"aws.amazon.com/neuron": 16, "vpc.amazonaws.com/efa": 8})
    mig = replace(node("mig-1", gpus=0), allocatable={"nvidia.com/mig-1g.10gb": 7})
    efa_only = replace(node("cpu-2", gpus=0), allocatable={"vpc.amazonaws.com/efa": 1})
    # Then GPU-idle counts them as accelerator nodes, and EFA alone is not an accelerator
    assert gpu_refusal(trn) is None
    assert gpu_refusal(mig) is None
    assert gpu_refusal(efa_only) is not None


def test_node_held_by_another_event_is_refused_but_not_its_own() -> None:
    held = node("n1", kind="spot-interruption")
    assert "already being handled for spot-interruption" in (held_elsewhere(held, "other") or "")
    assert held_elsewhere(held, "ev-n1") is None
    assert held_elsewhere(node("n2"), "x") is None


def test_min_nodes_counts_only_schedulable_not_held_nodes_of_the_same_pool() -> None:
    # Given a pool of 4: the candidate, one cordoned, one held by gpuwarden, one free; another pool's node
    candidate = node("a")
    nodes = [
        candidate,
        node("b", unschedulable=True),
        node("c", kind="gpu-idle"),
        node("d"),
        node("x", pool="other"),
    ]
    # Then with a minimum of 1, the free node keeps the pool alive; with 2 it refuses
    assert min_nodes_refusal(candidate, nodes, 1) is None
    reason = min_nodes_refusal(candidate, nodes, 2)
    assert reason == "nodepool gpu would keep 1 schedulable node, below gpu_idle.min_nodes_per_nodepool 2"
    assert min_nodes_refusal(candidate, [candidate], 0) is None


def test_managed_node_group_stands_in_for_a_nodepool() -> None:
    member = node("m", pool=None, labels={NODEGROUP_LABEL: "gpu-ng"})
    assert pool_of(member) == "gpu-ng"
    assert "nodepool gpu-ng would keep 0" in (min_nodes_refusal(member, [member], 1) or "")


def test_busy_again_names_the_peak_and_missing_data_is_a_skip() -> None:
    assert busy_refusal(Utilization((1.0, 0.0, 42.5, 3.0), 60), 10) == "node is busy again (42.5 %)"
    assert busy_refusal(Utilization((1.0, 9.9), 60), 10) is None
    missing = busy_refusal(Utilization((), 60), 10)
    assert missing is not None
    assert "no node_gpu_utilization data in the last 60 min" in missing


def test_threshold_itself_counts_as_busy() -> None:
    assert busy_refusal(Utilization((10.0,), 60), 10) == "node is busy again (10.0 %)"


def test_holders_are_ordered_by_claim_time_then_name() -> None:
    nodes = [
        node("z", kind="gpu-idle", claimed=T0),
        node("b", kind="gpu-idle", claimed=T0 + timedelta(microseconds=5)),
        node("a", kind="gpu-idle", claimed=T0 + timedelta(microseconds=5)),
        node("s", kind="spot-interruption"),
        node("free"),
    ]
    assert [n.name for n in gpu_idle_holders(nodes)] == ["z", "a", "b"]


def test_cap_keeps_exactly_the_first_claimants() -> None:
    # Given five racers that all wrote their claim
    racers = [node(f"n{i}", kind="gpu-idle", claimed=T0 + timedelta(milliseconds=i)) for i in range(5)]
    holders = gpu_idle_holders(racers)
    # When each decides with the same list, Then exactly the cap keep their slot
    kept = [n.name for n in racers if cap_refusal(n.name, holders, 3) is None]
    assert kept == ["n0", "n1", "n2"]
    reason = cap_refusal("n4", holders, 3)
    assert reason == "5 nodes already reclaiming for gpu-idle, at gpu_idle.max_nodes_per_evaluation 3"


def test_an_established_holder_outranks_a_later_burst() -> None:
    established = node("zz", kind="gpu-idle", claimed=T0)
    burst = [node(f"a{i}", kind="gpu-idle", claimed=T0 + timedelta(hours=1)) for i in range(3)]
    holders = gpu_idle_holders([*burst, established])
    assert cap_refusal("zz", holders, 1) is None
    assert all(cap_refusal(n.name, holders, 1) is not None for n in burst)


def test_precheck_refuses_without_writing_when_the_cap_is_full() -> None:
    holders = gpu_idle_holders([node(f"h{i}", kind="gpu-idle", claimed=T0) for i in range(3)])
    assert cap_precheck("new", holders, 3) is not None
    assert cap_precheck("h0", holders, 3) is None  # its own slot does not count against it
    assert cap_precheck("new", holders[:2], 3) is None


def test_voluntary_in_progress_counts_held_voluntary_nodes_of_the_pool() -> None:
    nodes = [
        node("a", kind="gpu-idle"),
        node("b", kind="rebalance"),
        node("c", kind="spot-interruption"),
        node("d", kind="gpu-idle", pool="other"),
        node("e"),
    ]
    assert voluntary_in_progress(nodes, "gpu", excluding="a", voluntary=VOLUNTARY) == 1


def test_claim_stamps_sort_as_instants() -> None:
    stamps = [claim_stamp(T0 + timedelta(microseconds=m)) for m in (999_999, 1, 1_000_000)]
    assert sorted(stamps) == [stamps[1], stamps[0], stamps[2]]


def test_nodeclaim_found_by_node_name_or_provider_id() -> None:
    target = node("n1")
    claims: list[dict[str, object]] = [
        {"metadata": {"name": "other"}, "status": {"nodeName": "n2"}},
        {"metadata": {"name": "by-provider"}, "status": {"providerID": target.provider_id}},
    ]
    found = nodeclaim_for(target, claims)
    assert found is not None
    assert found.name == "by-provider"
    assert not found.deleting
    deleting: list[dict[str, object]] = [
        {"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"}, "status": {"nodeName": "n1"}}
    ]
    found = nodeclaim_for(target, deleting)
    assert found is not None
    assert found.deleting
    assert nodeclaim_for(target, [{"metadata": {"name": "x"}, "status": {}}]) is None
