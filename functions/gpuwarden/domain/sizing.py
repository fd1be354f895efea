"""What a replacement NodeClaim asks for, as Karpenter sizes its own (docs/cluster.md, "What a
replacement requests"). Pure.

- The pods a replacement is for are the pods that move (`movers`): no DaemonSet pod (its
  DaemonSet runs one on the new node anyway), no mirror (static) pod (the kubelet of that node
  runs it; it never moves), nothing finished. Of those, the pods that need an accelerator or
  another device first (`displaced`): the others can run anywhere.
- Karpenter fills a NodeClaim's ``spec.resources.requests`` with the requests of the pods its
  scheduler put there (kubernetes-sigs/karpenter v1.14.1 pkg/controllers/provisioning/scheduling/
  nodeclaim.go, ``NodeClaim.Add``: ``resources.Merge(n.Spec.Resources.Requests, podData.Requests)``,
  each pod's requests being ``resources.Ceiling``, kube-scheduler's ``PodRequests``: init
  containers, sidecars, pod-level resources and overhead) plus, at ``FinalizeScheduling``,
  ``addDaemonRequests``: the requests of the DaemonSet pods that would schedule on a node of the
  NodePool (scheduler.go ``buildDaemonOverheadGroups`` / ``isDaemonPodCompatible``: the template's
  taints tolerated, PreferNoSchedule ignored; the pod's node selector and required affinity
  compatible with the template's requirements and labels, a custom label the template does not
  define counting as incompatible). ``resources.RequestsForPods`` also counts the pods
  (``pods``). gpuwarden asks for the same, less what no instance type advertises (MIG slices,
  ``neurondevice``, DRA devices, hugepages: `accelerators.replacement_demand` keeps the node's
  accelerator model for those instead).
- Karpenter takes the smallest overhead among the instance types the claim still allows; it
  knows each instance type's labels, gpuwarden only the template's, so a DaemonSet that selects
  an instance-type label the template does not pin is counted here (the larger answer).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from gpuwarden.domain.accelerators import REQUESTABLE, ResourceClaimView, pod_accelerators, replacement_demand
from gpuwarden.domain.nodepools import NodePoolView
from gpuwarden.domain.placement import Req, conflict, untolerated
from gpuwarden.domain.quantity import format_quantity
from gpuwarden.domain.views import NODEPOOL_LABEL, PodView, Taint, pod_from_json
from gpuwarden.domain.wording import count

#: The resources every instance type advertises besides its devices (Karpenter's AWS provider,
#: pkg/providers/instancetype/types.go ``computeCapacity``): what a claim asks for of them.
CORE = ("cpu", "memory", "ephemeral-storage")
#: An amount of a resource: exact (cpu in cores, memory in bytes), or a count.
Amount = Fraction | int
PODS = "pods"
#: Karpenter's ``WellKnownLabels`` (pkg/apis/v1/labels.go) and its AWS provider's label domain (and
#: EKS Auto Mode's): a pod may require one a template leaves undefined.
_WELL_KNOWN = frozenset(
    {
        NODEPOOL_LABEL,
        "topology.kubernetes.io/zone",
        "topology.kubernetes.io/region",
        "node.kubernetes.io/instance-type",
        "kubernetes.io/arch",
        "kubernetes.io/os",
        "karpenter.sh/capacity-type",
        "node.kubernetes.io/windows-build",
    }
)
_WELL_KNOWN_DOMAINS = ("karpenter.k8s.aws/", "eks.amazonaws.com/")
#: Karpenter adds these to a template's requirements for the DaemonSet simulation
#: (nodeclaimtemplate.go ``NewNodeClaimTemplate``).
_SIMULATED = (
    {"key": "karpenter.sh/registered", "operator": "In", "values": ["true"]},
    {"key": "karpenter.sh/initialized", "operator": "In", "values": ["true"]},
)


def movers(pods: Iterable[PodView]) -> list[PodView]:
    """The pods that move when their node goes: no DaemonSet pod, no mirror pod, nothing finished."""
    return [p for p in pods if not p.is_daemonset and not p.is_mirror and not p.finished]


def displaced(pods: Iterable[PodView], claims: Sequence[ResourceClaimView] = ()) -> list[PodView]:
    """The pods a replacement is for: the movers that need an accelerator or another device (the
    replacement is launched for them), else every mover."""
    moving = movers(pods)
    return [p for p in moving if pod_accelerators(p, claims).needs_device] or moving


# ----------------------------------------------------------------------------- DaemonSets


def daemon_pods(daemonsets: Iterable[Mapping[str, Any]]) -> list[PodView]:
    """Each DaemonSet's pod as Karpenter imagines it (provisioner.go ``getDaemonSetPods``,
    pkg/utils/daemonset ``PodForDaemonSet``): its template's spec, limits as requests."""
    out = []
    for ds in daemonsets:
        meta = ds.get("metadata") or {}
        template = (ds.get("spec") or {}).get("template") or {}
        pod = {
            "metadata": {
                "name": str(meta.get("name", "")),
                "namespace": str(meta.get("namespace", "default")),
                "ownerReferences": [
                    {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": meta.get("name"), "controller": True}
                ],
            },
            "spec": template.get("spec") or {},
            "status": {"phase": "Pending"},
        }
        out.append(pod_from_json(pod))
    return out


def _defined(key: str, template: Sequence[Mapping[str, Any]]) -> bool:
    return key in _WELL_KNOWN or key.startswith(_WELL_KNOWN_DOMAINS) or any(r.get("key") == key for r in template)


def _term_fits(template: list[Req], wanted: list[Req]) -> bool:
    """``Requirements.Compatible`` with ``AllowUndefinedWellKnownLabels``: a custom label the
    template does not define may only be required absent (NotIn, DoesNotExist)."""
    for req in wanted:
        if req.get("operator") not in ("NotIn", "DoesNotExist") and not _defined(str(req.get("key")), template):
            return False
    return conflict(template + wanted) is None


def _runs_there(pod: PodView, taints: Sequence[Taint], template: list[Req]) -> bool:
    """``isDaemonPodCompatible``: the template's taints tolerated (PreferNoSchedule aside), and the
    pod's node selector with one of its required node-affinity terms compatible."""
    if untolerated(pod, taints):
        return False
    selector: list[Req] = [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pod.node_selector.items())]
    for term in pod.required_node_affinity or ((),):
        wanted = selector + [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in term
            if e.key and e.operator
        ]
        if _term_fits(template, wanted):
            return True
    return False


def daemons_for(pool: NodePoolView, daemons: Iterable[PodView]) -> list[PodView]:
    """The DaemonSet pods that would run on a node of ``pool`` (its template's requirements and
    labels, with what Karpenter adds for the simulation)."""
    requirements: list[Req] = [dict(r) for r in pool.requirements]
    requirements += [{"key": k, "operator": "In", "values": [v]} for k, v in sorted(pool.labels.items())]
    requirements += [{"key": NODEPOOL_LABEL, "operator": "In", "values": [pool.name]}, *(dict(r) for r in _SIMULATED)]
    return [d for d in daemons if _runs_there(d, pool.taints, requirements)]


# ----------------------------------------------------------------------------- the claim's requests


def _asked(pod: PodView) -> dict[str, Fraction]:
    return {name: n for name, n in pod.all_requests.items() if n > 0 and (name in CORE or name in REQUESTABLE)}


@dataclass(frozen=True)
class Sizing:
    """A replacement's ``spec.resources.requests`` and where they come from."""

    requests: Mapping[str, Fraction]
    pods: tuple[str, ...]
    daemons: tuple[str, ...]

    def manifest(self) -> dict[str, str]:
        """As the NodeClaim carries them (Kubernetes quantities, memory in binary units)."""
        binary = ("memory", "ephemeral-storage")
        return {name: format_quantity(n, binary=name in binary) for name, n in sorted(self.requests.items())}

    @property
    def why(self) -> str:
        shown = ", ".join(f"{name} {q}" for name, q in self.manifest().items() if name != PODS)
        daemons = (
            f" and {count(len(self.daemons), 'DaemonSet pod')} ({', '.join(self.daemons)})" if self.daemons else ""
        )
        return f"requests {shown}: {count(len(self.pods), 'pod')}{daemons}"


def size(pods: Sequence[PodView], daemons: Sequence[PodView] = (), claims: Sequence[ResourceClaimView] = ()) -> Sizing:
    """The requests of a replacement for ``pods`` (those it is for: `displaced`) with ``daemons``
    (those that run there: `daemons_for`): cpu, memory, ephemeral storage and every device
    Karpenter can request, summed, and the count of pods."""
    total: dict[str, Fraction] = {}

    def add(asked: Mapping[str, Fraction]) -> None:
        for name, n in asked.items():
            total[name] = total.get(name, Fraction(0)) + n

    for pod in pods:
        add({name: n for name, n in _asked(pod).items() if name in CORE})
    # the moved pods' devices as `replacement_demand` counts them (a view built from a GPU count alone too)
    add({name: Fraction(n) for name, n in replacement_demand(pods, claims).requests.items()})
    for daemon in daemons:
        add(_asked(daemon))
    if pods or daemons:
        total[PODS] = Fraction(len(pods) + len(daemons))
    return Sizing(dict(sorted(total.items())), tuple(p.key for p in pods), tuple(d.key for d in daemons))
