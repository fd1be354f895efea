"""GPU-idle reclaim: the guardrails that stand between an idle alarm and a node (pure).

Every function answers ``None`` (go on) or the reason to skip, in words that go unchanged
into the JSON result, the log line and the Kubernetes Event.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.accelerators import ACCELERATOR_RESOURCES, node_accelerator_count
from gpuwarden.domain.nodepools import claim_of, nodeclaim_from_json
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.views import NodeView
from gpuwarden.domain.wording import count

#: The alarm state that asks for a reclaim; OK and INSUFFICIENT_DATA never do.
ACTING_STATE = "ALARM"
CLAIMED_AT = ann.CLAIMED_AT
#: EKS managed node groups label their nodes with this; it stands in for a NodePool there.
NODEGROUP_LABEL = "eks.amazonaws.com/nodegroup"


def state_refusal(state: object) -> str | None:
    if state == ACTING_STATE:
        return None
    return f"alarm state is {state or 'unknown'}: only ALARM reclaims a node"


def gpu_refusal(node: NodeView) -> str | None:
    """A node without an accelerator in its allocatable (a GPU, a MIG slice, a Neuron device:
    `accelerators.node_accelerator_count`) is never GPU-idle."""
    if node_accelerator_count(node) > 0:
        return None
    return f"node {node.name} has no accelerator in its allocatable ({', '.join(ACCELERATOR_RESOURCES)})"


def pool_of(node: NodeView) -> str | None:
    """The group the minimum applies to: the Karpenter NodePool, else the EKS node group."""
    return node.nodepool or node.labels.get(NODEGROUP_LABEL)


def held_kind(node: NodeView) -> str | None:
    """The kind gpuwarden holds the node for, if it does (annotation set by `mark_node`)."""
    return node.annotations.get(ann.KIND) if node.annotations.get(ann.EVENT_ID) else None


def held_elsewhere(node: NodeView, event_id: str) -> str | None:
    """Another notice already holds the node: a voluntary kind never takes it over."""
    holder = node.annotations.get(ann.EVENT_ID)
    if holder is None or holder == event_id:
        return None
    return f"node {node.name} is already being handled for {node.annotations.get(ann.KIND)} ({holder})"


def voluntary_in_progress(
    nodes: Iterable[NodeView], pool: str | None, *, excluding: str, voluntary: Collection[str]
) -> int:
    """Nodes of ``pool`` gpuwarden holds for one of the ``voluntary`` kinds (still listed: not gone)."""
    return sum(1 for n in nodes if n.name != excluding and pool_of(n) == pool and held_kind(n) in voluntary)


def min_nodes_refusal(node: NodeView, nodes: Sequence[NodeView], minimum: int) -> str | None:
    """Never leave fewer than ``minimum`` schedulable, not-held nodes in the node's pool."""
    pool = pool_of(node)
    available = [
        n for n in nodes if pool_of(n) == pool and n.name != node.name and not n.unschedulable and held_kind(n) is None
    ]
    if len(available) >= minimum:
        return None
    where = f"nodepool {pool}" if pool else "the nodes outside any NodePool or node group"
    kept = count(len(available), "schedulable node")
    return f"{where} would keep {kept}, below gpu_idle.min_nodes_per_nodepool {minimum}"


#: The accelerator-utilisation metrics a GPU-idle alarm may watch: Container Insights' GPU metric,
#: NVIDIA DCGM exporter's, and Container Insights' Neuron metric (Trainium, Inferentia).
GPU_METRICS = ("node_gpu_utilization", "DCGM_FI_DEV_GPU_UTIL", "node_neuroncore_utilization")
CONTAINER_INSIGHTS_METRIC = GPU_METRICS[0]
#: Container Insights with enhanced observability, "AWS Neuron metrics": the NeuronCore utilisation
#: of the node, percent, namespace ContainerInsights, dimensions ClusterName, InstanceId, NodeName
#: (Amazon CloudWatch User Guide, "Amazon EKS and Kubernetes Container Insights with enhanced
#: observability metrics"; docs/gpu-idle.md).
NEURON_METRIC = GPU_METRICS[2]


@dataclass(frozen=True)
class IdleMetric:
    """The one series the re-check at action time reads (docs/events.md, gpu-idle).

    A single-metric alarm on a GPU metric is re-checked on exactly its own series (namespace,
    name, dimensions from the alarm); a Metrics Insights alarm over DCGM's series on its own query,
    narrowed to the contributor's attributes; any other GPU-idle alarm (a query over
    `node_gpu_utilization`, an alarm taken by its name prefix) on Container Insights' per-node series.
    """

    namespace: str
    name: str
    dimensions: tuple[tuple[str, str], ...]
    #: A Metrics Insights alarm's own query, narrowed to this node (None: a plain metric series).
    query: str | None = None

    @classmethod
    def container_insights(cls, cluster: str, instance_id: str, node_name: str, neuron: bool = False) -> IdleMetric:
        """Container Insights' per-node series: GPU utilisation, or NeuronCore utilisation for a
        node whose accelerators are Neuron devices."""
        dims = (("ClusterName", cluster), ("InstanceId", instance_id), ("NodeName", node_name))
        return cls("ContainerInsights", NEURON_METRIC if neuron else CONTAINER_INSIGHTS_METRIC, dims)

    @classmethod
    def for_alarm(
        cls, watched: object, cluster: str, instance_id: str, node_name: str, neuron: bool = False
    ) -> IdleMetric:
        """The alarm's own series when the notice carries one (``detail["metric"]``): a metric, or a
        Metrics Insights query over a GPU metric (narrowed to the contributor); else the default
        (``neuron``: the node's accelerators are Neuron devices, `accelerators.is_neuron_node`)."""
        if isinstance(watched, dict) and isinstance(watched.get("query"), str):
            query = str(watched["query"])
            name = next((m for m in GPU_METRICS if m in query), None)
            where = watched.get("dimensions")
            neuron = neuron or name == NEURON_METRIC
            # over a Container Insights metric the query's series for one node is its own (the default)
            if name not in (None, CONTAINER_INSIGHTS_METRIC, NEURON_METRIC) and isinstance(where, dict) and where:
                pairs = tuple(sorted((str(k), str(v)) for k, v in where.items()))
                try:
                    return cls("MetricsInsights", str(name), pairs, query=narrow_query(query, pairs))
                except ValueError:
                    pass  # an attribute that cannot be quoted into the query: the default series
        if isinstance(watched, dict) and watched.get("name") in GPU_METRICS and watched.get("namespace"):
            dims = watched.get("dimensions") or {}
            if isinstance(dims, dict):
                pairs = tuple(sorted((str(k), str(v)) for k, v in dims.items()))
                return cls(str(watched["namespace"]), str(watched["name"]), pairs)
        return cls.container_insights(cluster, instance_id, node_name, neuron)


_CLAUSE = re.compile(r"\s(GROUP\s+BY|ORDER\s+BY|LIMIT)\s", re.IGNORECASE)
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:/-]+$")


def narrow_query(query: str, where: Sequence[tuple[str, str]]) -> str:
    """A Metrics Insights query (``SELECT … FROM SCHEMA(…) [WHERE …] [GROUP BY …] [ORDER BY …]
    [LIMIT …]``) narrowed to one contributor: its attributes ANDed into the WHERE clause, the
    grouping kept (one series left). A value that is not a plain name is refused (ValueError)."""
    terms = []
    for key, value in where:
        if not _SAFE_VALUE.match(key) or not _SAFE_VALUE.match(value):
            raise ValueError(f"contributor attribute {key}={value!r} cannot be put into a query")
        terms.append(f"{key} = '{value}'")
    condition = " AND ".join(terms)
    cut = _CLAUSE.search(query)
    head, tail = (query[: cut.start()], query[cut.start() :]) if cut else (query, "")
    joiner = " AND " if re.search(r"\sWHERE\s", head, re.IGNORECASE) else " WHERE "
    return f"{head.rstrip()}{joiner}{condition}{tail}"


@dataclass(frozen=True)
class Utilization:
    """GPU utilisation (percent) of the re-checked series over the re-check window, oldest first."""

    values: tuple[float, ...]
    minutes: int
    metric: str = "node_gpu_utilization"


def busy_refusal(utilization: Utilization, threshold: float) -> str | None:
    """Re-check at action time. No data is not idleness: skip (the safe default)."""
    if not utilization.values:
        return (
            f"no {utilization.metric} data in the last {utilization.minutes} min: "
            "not reclaiming a node whose idleness cannot be confirmed"
        )
    peak = max(utilization.values)
    if peak >= threshold:
        return f"node is busy again ({peak:.1f} %)"
    return None


def _claim_key(node: NodeView) -> tuple[str, str]:
    # RFC 3339 UTC strings of one fixed format sort as their instants; a missing claim sorts last
    return (node.annotations.get(CLAIMED_AT) or "~", node.name)


def gpu_idle_holders(nodes: Iterable[NodeView]) -> list[NodeView]:
    """Nodes held for gpu-idle and not gone, in claim order (claim time, then name)."""
    return sorted((n for n in nodes if held_kind(n) == Kind.GPU_IDLE.value), key=_claim_key)


def cap_refusal(node_name: str, holders: Sequence[NodeView], cap: int) -> str | None:
    """After taking a slot: keep it only if the node is among the first ``cap`` claimants.

    Every racer sorts the same holders the same way, so a burst of contributor events
    settles on exactly ``cap`` nodes; the others release theirs.
    """
    names = [n.name for n in holders]
    if node_name in names[:cap]:
        return None
    return f"{count(len(holders), 'node')} already reclaiming for gpu-idle, at gpu_idle.max_nodes_per_evaluation {cap}"


def cap_precheck(node_name: str, holders: Sequence[NodeView], cap: int) -> str | None:
    """Before writing: when ``cap`` others hold a slot already, do not even try."""
    others = [n for n in holders if n.name != node_name]
    if len(others) < cap:
        return None
    return f"{count(len(others), 'node')} already reclaiming for gpu-idle, at gpu_idle.max_nodes_per_evaluation {cap}"


def claim_stamp(at: datetime) -> str:
    """A sortable UTC timestamp with microseconds (the claim order of racing handlers)."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeClaimRef:
    name: str
    deleting: bool


def nodeclaim_for(node: NodeView, claims: Iterable[dict[str, object]]) -> NodeClaimRef | None:
    """The Karpenter NodeClaim behind ``node`` (`nodepools.claim_of`: owner reference, ``status.nodeName``
    or ``status.providerID``)."""
    found = claim_of(node, [nodeclaim_from_json(c) for c in claims])
    return None if found is None else NodeClaimRef(name=found.name, deleting=found.deleting)
