"""DRY_RUN wraps the adapters once (docs/architecture.md): reads pass through, writes are only imagined.

Each imagined write answers as the real one would, so the services plan the same steps.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpuwarden.domain.actions import EvictionResult
from gpuwarden.domain.ports import CloudPort, EvictionOutcome, ExecOutcome, HttpPort, KubePort
from gpuwarden.domain.views import NodeView, PodView, Taint


def _merged(annotations: Mapping[str, str], patch: Mapping[str, Any]) -> dict[str, str]:
    out = dict(annotations)
    for key, value in ((patch.get("metadata") or {}).get("annotations") or {}).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = str(value)
    return out


def _merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: what the API server would answer to a merge patch."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge_patch(out.get(key), value)
    return out


#: Observe mode posts each Event of what would have happened with this prefix on its reason
#: (`WouldCordon`, `WouldEvict`…), so `kubectl get events` shows it (docs/rollback.md#observe).
WOULD = "Would"


class DryRunKube:
    """``observe``: the one write let through is the Kubernetes Event, as "Would…" (the deploy
    setting `-c mode=observe`); otherwise nothing at all is written."""

    def __init__(self, real: KubePort, *, observe: bool = False) -> None:
        self._real = real
        self.observe = observe
        self.intended: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:  # reads: get_*, list_*
        return getattr(self._real, name)

    def _intend(self, verb: str, **what: Any) -> None:
        self.intended.append({"verb": verb, **copy.deepcopy(what)})

    def patch_node(self, name: str, patch: Mapping[str, Any], resource_version: str | None) -> NodeView:
        self._intend("patch-node", node=name, patch=dict(patch))
        node = self._real.get_node(name)
        if node is None:
            raise LookupError(name)
        spec = patch.get("spec") or {}
        taints = node.taints
        if "taints" in spec:
            taints = tuple(Taint(t["key"], t["effect"], t.get("value")) for t in spec["taints"])
        return replace(
            node,
            annotations=_merged(node.annotations, patch),
            taints=taints,
            unschedulable=bool(spec.get("unschedulable", node.unschedulable)),
        )

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None) -> PodView:
        self._intend("patch-pod", pod=f"{namespace}/{name}", patch=dict(patch))
        pod = self._real.get_pod(namespace, name)
        if pod is None:
            raise LookupError(f"{namespace}/{name}")
        return replace(pod, annotations=_merged(pod.annotations, patch))

    def evict_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> EvictionOutcome:
        self._intend("evict", pod=f"{namespace}/{name}", uid=uid, grace_seconds=grace_seconds)
        return EvictionOutcome(EvictionResult.EVICTED)

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int) -> bool:
        self._intend("delete", pod=f"{namespace}/{name}", uid=uid, grace_seconds=grace_seconds)
        return True

    def exec_in_pod(
        self, namespace: str, name: str, container: str, command: Sequence[str], timeout: float
    ) -> ExecOutcome:
        self._intend("exec", pod=f"{namespace}/{name}", container=container, command=list(command))
        return ExecOutcome(exit_code=0, output="(dry run)", imagined=True)

    def create_node_event(self, node: NodeView, reason: str, message: str, warning: bool = False) -> None:
        self._intend("event", node=node.name, reason=reason)
        if self.observe:
            self._real.create_node_event(node, WOULD + reason, f"would have: {message}", warning)

    def create_pod_event(self, pod: PodView, reason: str, message: str, warning: bool = False) -> None:
        self._intend("event", pod=pod.key, reason=reason)

    def create_nodepool_event(
        self, nodepool: Mapping[str, Any], reason: str, message: str, warning: bool = False
    ) -> None:
        self._intend("event", nodepool=(nodepool.get("metadata") or {}).get("name"), reason=reason)
        if self.observe:
            self._real.create_nodepool_event(nodepool, WOULD + reason, f"would have: {message}", warning)

    def patch_nodepool(self, name: str, patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
        self._intend("patch-nodepool", nodepool=name, patch=dict(patch))
        return _patched(self._real.get_nodepool(name), name, patch)

    def patch_nodeclaim(self, name: str, patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
        self._intend("patch-nodeclaim", nodeclaim=name, patch=dict(patch))
        return _patched(self._real.get_nodeclaim(name), name, patch)

    def create_nodeclaim(self, body: Mapping[str, Any]) -> str:
        self._intend("create-nodeclaim", body=dict(body))
        return str(body["metadata"]["name"])

    def delete_nodeclaim(self, name: str) -> bool:
        self._intend("delete-nodeclaim", nodeclaim=name)
        return True


class DryRunCloud:
    def __init__(self, real: CloudPort) -> None:
        self._real = real
        self.intended: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:  # reads: instance_identity, asg_of
        return getattr(self._real, name)

    def raise_asg_desired(self, group: str, token: str) -> str:
        self.intended.append({"verb": "asg-desired+1", "group": group})
        return f"asg/{group}"

    def launch_fleet(self, token: str, template: str, instance_types: Sequence[str], subnets: Sequence[str]) -> str:
        self.intended.append({"verb": "create-fleet", "template": template, "types": list(instance_types)})
        return "fleet/(dry-run)"

    def terminate_in_asg(self, instance_id: str) -> None:
        self.intended.append({"verb": "terminate-in-asg", "instance_id": instance_id})


class DryRunHttp:
    """A checkpoint POST to a workload is a write too: imagined, answered 200."""

    def __init__(self, real: HttpPort) -> None:
        self._real = real
        self.intended: list[dict[str, Any]] = []

    def post(self, url: str, timeout: float) -> int:
        self.intended.append({"verb": "post", "url": url})
        return 200


def _patched(current: dict[str, Any] | None, name: str, patch: Mapping[str, Any]) -> dict[str, Any]:
    """What a merge patch of a custom object would leave (nothing is written)."""
    if current is None:
        raise LookupError(name)
    merged: dict[str, Any] = _merge_patch(current, patch)
    return merged
