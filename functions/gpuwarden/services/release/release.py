"""`gpuwarden release`: the way back (docs/rollback.md).

On each node (one, or every node of the cluster): gpuwarden's taint, its cordon (only a cordon
gpuwarden made) and every `gpuwarden.io/` annotation it wrote, the replacement record and a held
maintenance plan included; on the node's pods, the `karpenter.sh/do-not-disrupt` marks gpuwarden
added (an owner's own is never touched) and the checkpoint request annotations gpuwarden wrote.
On the replacement NodeClaims gpuwarden launched (with one node: that node's claim), their
`karpenter.sh/do-not-disrupt` hold and every `gpuwarden.io/` annotation, through the reconcile's
`release_holds`. With every node, the NodePools too: their budgets and limits restored exactly from what the
windows saved (the routing table hands that part in, from the windows use case).

Each write goes through the one write primitive (read → decide → RV-checked write), so a release
run twice, or beside a notice, changes nothing the second time; what is not gpuwarden's is left
as it is. A dry run says what it would take back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import NotFound
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.domain.wording import count
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.holds import NODECLAIM, release_holds
from gpuwarden.services.engine.karpenter import release_pod_patch
from gpuwarden.services.engine.result import Result, finished
from gpuwarden.services.engine.writes import Patch, annotate, release_node, update_pod

KIND = "manual"
RELEASED = "taken back by gpuwarden release: do-not-disrupt and every gpuwarden.io/ annotation of the claim"
#: The checkpoint handshake's marks on a pod, which a release takes back (the request gpuwarden
#: wrote and the workload's acknowledgement of it); the owner's opt-in annotations stay.
POD_MARKS = (ann.CHECKPOINT_REQUESTED, ann.CHECKPOINT_EVENT, ann.CHECKPOINT_FAILED, ann.CHECKPOINT_DONE)


def pod_release_patch(pod: PodView) -> Patch | None:
    """The do-not-disrupt gpuwarden added, and the checkpoint request it wrote."""
    marks = [k for k in POD_MARKS if k in pod.annotations]
    dnd = release_pod_patch(pod)
    if not marks and dnd is None:
        return None
    return annotate(dict.fromkeys(marks) | dict(((dnd or {}).get("metadata") or {}).get("annotations") or {}))


def _release_node(recorder: Recorder, node: NodeView, pods: Sequence[PodView]) -> list[dict[str, Any]]:
    """The node's marks, then its ``pods``' (as listed: those on it)."""
    kube = recorder.deps.kube
    written = release_node(kube, node, every_mark=True)
    done: list[dict[str, Any]] = []
    if written.written and written.obj is not None:
        cordon = ["cordon"] if node.annotations.get(ann.CORDONED_BY_US) == "true" else []
        taint = [f"taint {ann.TAINT_KEY}"] if any(t.key == ann.TAINT_KEY for t in node.taints) else []
        taken = sorted(k for k in node.annotations if k.startswith(ann.PREFIX))
        why = "gpuwarden's marks taken back: " + ", ".join([*cordon, *taint, *taken])
        done.append(recorder.add(ActionType.RELEASE, written.obj, target=node.name, reason=why))
    for pod in pods:
        released = update_pod(kube, pod, pod_release_patch)
        if released.written:
            marks = [k for k in (*POD_MARKS, ann.DO_NOT_DISRUPT_ADDED) if k in pod.annotations]
            done.append(recorder.add(ActionType.POD_RELEASED, pod=pod.key, reason="taken back: " + ", ".join(marks)))
    return done


def _marked_pods(deps: Deps, node_name: str | None) -> dict[str, list[PodView]]:
    """The pods on a node that carry a mark to take back, by node: with one node, the LIST of its
    pods; with every node, one paginated LIST of the cluster's pods, the unmarked dropped page by
    page, never one LIST per node (1,000 requests at 1,000 nodes, where the paginated LIST of
    30,000 pods is 60: docs/benchmarks.md, "release --all at 1,000 nodes")."""

    def marked(pod: PodView) -> bool:
        return bool(pod.node_name) and pod_release_patch(pod) is not None

    if node_name is None:
        pods = deps.kube.list_pods_where(marked)
    else:
        pods = [p for p in deps.kube.list_pods_on_node(node_name) if p.node_name == node_name and marked(p)]
    by_node: dict[str, list[PodView]] = {}
    for pod in pods:
        by_node.setdefault(str(pod.node_name), []).append(pod)
    return by_node


def release(
    deps: Deps, node_name: str | None, *, event_id: str, also: Callable[[Recorder], str] | None = None
) -> Result:
    """Take back gpuwarden's marks on one node (``node_name``) or on every node (None), then run
    ``also`` into the same record (the NodePools, with every node)."""
    recorder = Recorder(deps, event_id)
    if node_name is not None:
        found = deps.kube.get_node(node_name)
        if found is None:
            raise NotFound(f"node {node_name} is not in cluster {deps.policy.cluster}")
        nodes = [found]
    else:
        nodes = deps.kube.list_nodes()
    marked = _marked_pods(deps, node_name)
    touched = [n.name for n in nodes if _release_node(recorder, n, marked.get(n.name, ()))]
    # the replacements' own holds (NodeClaim and node), taken back at once: the reconcile's function
    touched += [NODECLAIM + name for name in release_holds(recorder, reason=RELEASED, node=node_name, nodes=nodes)]
    recorder.flush()
    # with --all, what was looked at (the cluster's nodes) and what held a mark are two counts
    where = node_name or f"the cluster's {count(len(nodes), 'node')}"
    held = node_name or f"{count(len(touched), 'object')} of {where}"
    if not touched:
        reason = f"nothing to release on {where}: no gpuwarden mark"
    elif deps.dry_run:
        reason = f"would release {held}: marks to take back on {', '.join(touched)}"
    else:
        reason = f"released {held}: marks taken back on {', '.join(touched)}"
    if also is not None:
        reason += also(recorder)
    return Result(
        outcome=finished(deps.dry_run, "handled" if recorder.actions else "ignored"),
        kind=KIND,
        node=node_name,
        event_id=event_id,
        reason=reason,
        actions=recorder.actions,
    )
