"""Limits and tiers (docs/cluster.md, "Limits and tiers"): whether a NodePool's ``spec.limits`` leave
room for a replacement, and, when the node's own pool cannot take it, which other NodePools' templates
admit the displaced pods, in the order Karpenter tries them. Pure; every pool's answer says why.

- Limits, as Karpenter's provisioner checks them (kubernetes-sigs/karpenter v1.13.0): ``Create``
  refuses a NodeClaim while ``spec.limits.ExceededBy(status.resources)`` (pkg/controllers/
  provisioning/provisioner.go; ``Limits.ExceededBy``, pkg/apis/v1/nodepool.go: usage above the
  limit), and the scheduler leaves out instance types whose capacity exceeds limit - usage
  (pkg/controllers/provisioning/scheduling/scheduler.go, ``filterByRemainingResources``).
  gpuwarden creates its NodeClaim itself, past that provisioner, so it checks
  ``status.resources + the replacement's requests <= spec.limits`` for every limited resource,
  counting the replacement as one of ``nodes``. The capacity of the interrupted node may be
  ``releasing``: Karpenter's own interruption handling deletes the NodeClaim first, and a deleting
  node's capacity leaves the pool's resources (pkg/controllers/state/cluster.go,
  ``MarkedForDeletion`` → no resources).
- Tiers: the other pools by ``spec.weight``, highest first, equal weights by name, later in the
  alphabet first (pkg/utils/nodepool/nodepool.go, ``OrderByWeight``). A static NodePool
  (``spec.replicas``) is never provisioned for pods and is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from gpuwarden.domain.nodepools import NodePoolView
from gpuwarden.domain.placement import Req, conflict, restricted, untolerated, values_for
from gpuwarden.domain.sizing import Amount, daemons_for, size
from gpuwarden.domain.views import NODEPOOL_LABEL, ZONE_LABEL, NodeView, PodView

#: The count of a pool's nodes in ``spec.limits`` / ``status.resources``.
NODES = "nodes"


def _shown(amount: Fraction) -> str:
    return str(amount.numerator) if amount.denominator == 1 else f"{float(amount):g}"


def releasing(node: NodeView) -> dict[str, Fraction]:
    """What leaves the pool when ``node`` goes: its capacity (cpu, memory, extended resources), and
    one node."""
    left = {name: Fraction(n) for name, n in node.capacity.items()} | dict(node.capacity_quantities)
    return {**left, NODES: Fraction(1)}


def limits_refusal(
    pool: NodePoolView, requests: Mapping[str, Amount], leaving: Mapping[str, Fraction] | None = None
) -> str | None:
    """Why ``pool``'s limits leave no room for a replacement with ``requests`` (None: they do)."""
    if pool.unreadable_limits:
        return f"NodePool {pool.name}: spec.limits {', '.join(pool.unreadable_limits)} do not read as quantities"
    wanted = {name: Fraction(n) for name, n in requests.items()}
    wanted[NODES] = wanted.get(NODES, Fraction(0)) + 1
    for name, limit in sorted(pool.limits.items()):
        used = max(pool.resources.get(name, Fraction(0)) - (leaving or {}).get(name, Fraction(0)), Fraction(0))
        after = used + wanted.get(name, Fraction(0))
        if after > limit:
            return (
                f"NodePool {pool.name}: spec.limits {name} is {_shown(limit)}; {_shown(used)} in use and "
                f"{_shown(wanted.get(name, Fraction(0)))} for the replacement make {_shown(after)}"
            )
    return None


def _alternatives(pod: PodView) -> list[list[Req]]:
    """The pod's nodeSelector with each of its required node-affinity terms (ORed), as requirements
    a NodeClaim may carry."""
    selector: list[Req] = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pod.node_selector.items())]
    out = []
    for term in pod.required_node_affinity or ((),):
        wanted = selector + [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in term
            if e.key and e.operator
        ]
        out.append([r for r in wanted if restricted(r["key"]) is None])
    return out


def _with_pods(base: list[Req], pods: Sequence[PodView]) -> tuple[list[Req], str | None]:
    """The template's requirements with, for each pod, the first of its alternatives that fits."""
    requirements = list(base)
    for pod in pods:
        fitting = next((alt for alt in _alternatives(pod) if conflict(requirements + alt) is None), None)
        if fitting is None:
            return requirements, f"{conflict(requirements + _alternatives(pod)[0])} ({pod.key})"
        requirements += fitting
    return requirements, None


def admits(pool: NodePoolView, pods: Sequence[PodView], zones: Sequence[str] = ()) -> str | None:
    """Why ``pool``'s template does not admit ``pods`` (None: it does): a taint not tolerated, the
    pods' nodeSelector or required node affinity against the template's requirements and labels,
    or none of ``zones`` (the volumes' or the gang's) allowed there."""
    if pool.static:
        return f"NodePool {pool.name} is static (spec.replicas): Karpenter provisions it for no pod"
    for pod in pods:
        blocking = untolerated(pod, pool.taints)
        if blocking:
            shown = ", ".join(f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}" for t in blocking)
            return f"NodePool {pool.name}: {pod.key} does not tolerate its taint {shown}"
    requirements = [dict(r) for r in pool.requirements]
    requirements += [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pool.labels.items())]
    requirements.append({"key": NODEPOOL_LABEL, "operator": "In", "values": [pool.name]})
    requirements, found = _with_pods(requirements, pods)
    if found is not None:
        return f"NodePool {pool.name}: {found}"
    allowed = values_for(requirements, ZONE_LABEL)
    if zones and not any(allowed.allows(z) for z in zones):
        return f"NodePool {pool.name}: the pods must stay in {', '.join(zones)}, which its requirements rule out"
    return None


@dataclass(frozen=True)
class TierChoice:
    pool: str
    refused: str | None


@dataclass(frozen=True)
class Tiers:
    """Every NodePool in the order to try it (the node's own first), each with why it cannot
    take the replacement (None: it can)."""

    choices: tuple[TierChoice, ...]

    @property
    def usable(self) -> tuple[str, ...]:
        return tuple(c.pool for c in self.choices if c.refused is None)

    @property
    def reason(self) -> str:
        """Each pool's reason, in order: what the answer names when none can take it."""
        return "; ".join(c.refused for c in self.choices if c.refused) or "every NodePool has room"


def by_weight(pools: Sequence[NodePoolView]) -> list[NodePoolView]:
    """``OrderByWeight``: larger weight first; equal weights, the name later in the alphabet first."""
    return sorted(pools, key=lambda p: (p.weight, p.name), reverse=True)


def tiers(
    own: str,
    pools: Sequence[NodePoolView],
    pods: Sequence[PodView],
    node: NodeView,
    requests: Mapping[str, Amount],
    *,
    zones: Sequence[str] = (),
    lost: bool = False,
    daemons: Sequence[PodView] = (),
) -> Tiers:
    """Where a replacement for ``node``'s displaced ``pods`` (those it is for: `sizing.displaced`),
    which ask ``requests`` (`sizing.size`), may be created: ``own`` pool first, then the others by
    weight, each pool's limits checked with those requests plus its own DaemonSet overhead (of
    ``daemons``, those that run on its nodes: `sizing.daemons_for`). ``zones``: where the pods must
    stay (their volumes', else their gang's). ``lost``: the node is being taken (its capacity leaves
    ``own``)."""
    ordered = [p for p in pools if p.name == own] + by_weight([p for p in pools if p.name != own])
    choices = []
    for pool in ordered:
        leaving = releasing(node) if lost and pool.name == own else None
        asked = dict(requests)
        for name, n in size((), daemons_for(pool, daemons)).requests.items():
            asked[name] = asked.get(name, 0) + n
        refused = admits(pool, pods, zones) or limits_refusal(pool, asked, leaving)
        choices.append(TierChoice(pool.name, refused))
    if all(p.name != own for p in pools):
        choices.insert(0, TierChoice(own, f"NodePool {own} is not in the cluster"))
    return Tiers(tuple(choices))
