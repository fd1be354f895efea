"""`gpuwarden release [--all | --node NAME] [--dry-run]`: the way back (docs/rollback.md).

Removes every mark gpuwarden left, through the writes that put them there:

- nodes: its taint, its cordon (only where `gpuwarden.io/cordoned` says it cordoned), every
  `gpuwarden.io/` annotation (`engine.writes.release_node`, ``every_mark``);
- pods on those nodes: the `karpenter.sh/do-not-disrupt` it added (recorded beside it as
  `gpuwarden.io/do-not-disrupt-added`; an owner's own is never touched) and its checkpoint
  handshake marks (`engine.karpenter.release_pod_patch` + ``POD_MARKS``); the owner's opt-in
  annotations (`gpuwarden.io/checkpoint`, `-container`, `-timeout-seconds`) stay;
- with ``--all``, NodePools: the windows' budgets and GPU caps written back exactly from
  `gpuwarden.io/saved-budgets` (`windows.reconcile_nodepool` with no window open).

Every write is RV-checked and decided from the object as read, so a second run finds nothing
to do (``ignored``) and a dry run (ports wrapped once, `wiring.dry_run_view`) writes nothing.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import Deps, Recorder
from gpuwarden.services.engine.karpenter import release_pod_patch
from gpuwarden.services.engine.result import Outcome, Result
from gpuwarden.services.engine.writes import Patch, release_node, update_pod
from gpuwarden.services.windows.windows import reconcile_nodepool

#: What gpuwarden writes on a pod during a checkpoint handshake (the owner's opt-in is not ours).
POD_MARKS = (ann.CHECKPOINT_REQUESTED, ann.CHECKPOINT_EVENT, ann.CHECKPOINT_FAILED, ann.CHECKPOINT_DONE)


def pod_release_patch(pod: PodView) -> Patch | None:
    """gpuwarden's marks on one pod, taken back; None when it carries none."""
    patch = release_pod_patch(pod)
    marks = {k: None for k in POD_MARKS if k in pod.annotations}
    if patch is None and not marks:
        return None
    annotations = {**((patch or {}).get("metadata") or {}).get("annotations", {}), **marks}
    return {"metadata": {"annotations": annotations}}


def release(deps: Deps, *, node: str | None = None) -> Result:
    """Every node (``node`` None: `--all`, NodePools included) or one node given back."""
    recorder = Recorder(deps, f"release-{deps.clock().strftime('%Y%m%dT%H%M%SZ')}-{uuid.uuid4().hex[:8]}")
    if node is not None:
        found = deps.kube.get_node(node)
        if found is None:
            reason = f"not found: {node} is not a node of cluster {deps.policy.cluster}"
            return Result(outcome="failed", kind=Kind.MANUAL.value, action="release", node=node, reason=reason)
        nodes = [found]
    else:
        nodes = deps.kube.list_nodes()
    for view in nodes:
        _release_node(recorder, view)
    pools = _restore_nodepools(recorder) if node is None else 0
    recorder.flush()
    changed = len(recorder.actions)
    scope = f"node {node}" if node else f"{len(nodes)} node(s) and {pools} NodePool(s)"
    failed = any(a["type"] == ActionType.NODEPOOL_FAILED for a in recorder.actions)
    outcome: Outcome = "failed" if failed else "dry-run" if deps.dry_run else "handled" if changed else "ignored"
    verb = "would remove" if deps.dry_run else "removed"
    reason = f"{verb} {changed} gpuwarden mark(s) on {scope}" if changed else f"nothing of gpuwarden's on {scope}"
    return Result(
        outcome=outcome,
        kind=Kind.MANUAL.value,
        action="release",
        dry_run=deps.dry_run,
        node=node,
        event_id=recorder.event_id,
        reason=reason,
        actions=recorder.actions,
    )


def _release_node(recorder: Recorder, node: NodeView) -> None:
    kube = recorder.deps.kube
    written = release_node(kube, node, every_mark=True)
    if written.written:
        recorder.add(ActionType.RELEASE, node=written.obj, target=f"node/{node.name}", reason="gpuwarden release")
    for pod in kube.list_pods_on_node(node.name):
        if pod.node_name != node.name:
            continue
        if update_pod(kube, pod, pod_release_patch).written:
            recorder.add(ActionType.RELEASE, pod=pod.key, reason="gpuwarden's pod marks taken back")


def _restore_nodepools(recorder: Recorder) -> int:
    """Every NodePool's budgets and limits written back from what the windows saved."""
    deps = recorder.deps
    closed = replace(deps, policy=deps.policy.model_copy(update={"windows": []}))
    pools = deps.kube.list_nodepools()
    for pool in pools:
        name = pool["metadata"]["name"]
        try:
            report = reconcile_nodepool(closed, pool, deps.window_clock())
        except GpuwardenError as err:
            recorder.add(ActionType.NODEPOOL_FAILED, target=f"nodepool/{name}", reason=str(err))
            continue
        if report.outcome == "written":
            fields = ", ".join(c.field for c in report.changes) or ann.SAVED_BUDGETS
            recorder.add(ActionType.NODEPOOL_SET, target=f"nodepool/{name}", reason=f"restored {fields}")
    return len(pools)
