"""The one way gpuwarden writes a Kubernetes object it shares with others.

Read → decide a patch (or nothing) → resourceVersion-checked write → on a conflict (409)
re-read and decide again, at most `CONFLICT_LIMIT` times; when that runs out the write
raises `WriteConflicts` (a typed `KubeError`, status 409) and nothing is half-written. The
decision is a pure function of the object as it is now, so the re-decided write is always
the right one for the object it lands on. An object that is gone (404 on the write or the
re-read) ends the loop with ``obj=None``: the caller says what a gone object means to it.

Every node and pod claim goes through here (the mark, the checkpoint claim on a pod, the
replacement claim, the lost-event record, the maintenance plan, the gpu-idle slot), and so
does `release_node`, the one way gpuwarden gives a node back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.errors import Conflict, NotFound, WriteConflicts
from gpuwarden.domain.ports import KubePort
from gpuwarden.domain.views import NodeView, PodView

#: How many times a write re-reads and re-decides after losing a race, in the whole package.
CONFLICT_LIMIT = 8

T = TypeVar("T")
Patch = Mapping[str, Any]
Decide = Callable[[T], Patch | None]


__all__ = ["CONFLICT_LIMIT", "WriteConflicts", "Written", "release_node", "update", "update_node", "update_pod"]


@dataclass(frozen=True)
class Written(Generic[T]):
    """The object as the last read or write left it (None: gone), and whether this call wrote it."""

    obj: T | None
    written: bool


def update(
    what: str,
    current: T | None,
    decide: Decide[T],
    write: Callable[[Patch, str | None], T],
    reread: Callable[[], T | None],
    version: Callable[[T], str | None],
) -> Written[T]:
    """The loop every RV-checked write uses (nodes, pods, and any object with a resourceVersion)."""
    obj = current if current is not None else reread()
    for _ in range(CONFLICT_LIMIT):
        if obj is None:
            return Written(None, False)
        patch = decide(obj)
        if patch is None:
            return Written(obj, False)
        try:
            return Written(write(patch, version(obj)), True)
        except Conflict:
            obj = reread()
        except NotFound:
            return Written(None, False)
    raise WriteConflicts(what, CONFLICT_LIMIT)


def update_node(kube: KubePort, node: NodeView | str, decide: Decide[NodeView]) -> Written[NodeView]:
    """RV-checked write of one node (``node``: a view already read, or a name to read first)."""
    name = node if isinstance(node, str) else node.name
    return update(
        f"node {name}",
        None if isinstance(node, str) else node,
        decide,
        lambda patch, rv: kube.patch_node(name, patch, rv),
        lambda: kube.get_node(name),
        lambda n: n.resource_version,
    )


def update_pod(kube: KubePort, pod: PodView, decide: Decide[PodView]) -> Written[PodView]:
    """RV-checked write of one pod."""
    namespace, name = pod.namespace, pod.name
    return update(
        f"pod {pod.key}",
        pod,
        decide,
        lambda patch, rv: kube.patch_pod(namespace, name, patch, rv),
        lambda: kube.get_pod(namespace, name),
        lambda p: p.resource_version,
    )


def annotate(values: Mapping[str, str | None]) -> dict[str, Any]:
    """A merge patch that sets (or, with None, removes) annotations."""
    return {"metadata": {"annotations": dict(values)}}


def release_patch(node: NodeView, *, every_mark: bool = False) -> dict[str, Any] | None:
    """Undo only what a disruption set: gpuwarden's taint, its cordon (only when
    `gpuwarden.io/cordoned` says gpuwarden cordoned the node) and the disruption's annotations
    (`ann.DISRUPTION_MARKS`). Kept: the replacement record (one replacement per node), the
    lost-event record and a maintenance plan (a hold of its own), unless ``every_mark`` (the
    `gpuwarden release` roll-back: every `gpuwarden.io/` annotation). None: nothing to undo."""
    marks = [k for k in node.annotations if k.startswith(ann.PREFIX)] if every_mark else ann.DISRUPTION_MARKS
    ours = [k for k in marks if k in node.annotations]
    tainted = any(t.key == ann.TAINT_KEY for t in node.taints)
    if not ours and not tainted:
        return None
    spec: dict[str, Any] = {"taints": [t.as_dict() for t in node.taints if t.key != ann.TAINT_KEY]}
    if node.annotations.get(ann.CORDONED_BY_US) == "true":
        spec["unschedulable"] = False
    return {"metadata": {"annotations": dict.fromkeys(ours)}, "spec": spec}


def release_node(
    kube: KubePort, node: NodeView | str, *, held_for: str | None = None, every_mark: bool = False
) -> Written[NodeView]:
    """Give the node back (`release_patch`), RV-checked. With ``held_for``, only while that event
    still holds the node: a node another notice took over meanwhile is left alone."""

    def decide(current: NodeView) -> Patch | None:
        if held_for is not None and current.annotations.get(ann.EVENT_ID) != held_for:
            return None
        return release_patch(current, every_mark=every_mark)

    return update_node(kube, node, decide)
