"""Replacement capacity: never more than one per interrupted node (CONTRACT §2)."""

from __future__ import annotations

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.errors import GpuwardenError
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.replacement import ReplacementChoice, choose_replacement, nodeclaim_manifest
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.context import Recorder
from gpuwarden.services.writes import Patch, annotate, update_node

PENDING = "pending:"


def _claim(recorder: Recorder, node: NodeView) -> NodeView | None:
    """Write `replacement: pending:<event>` RV-checked; the winner launches. None: not ours to launch."""
    ours = PENDING + recorder.event_id

    def decide(current: NodeView) -> Patch | None:
        return None if current.annotations.get(ann.REPLACEMENT) else annotate({ann.REPLACEMENT: ours})

    claimed = update_node(recorder.deps.kube, node, decide)
    if claimed.obj is None:
        return None
    # our own claim, from a run that stopped before recording the launch, is ours to resume
    return claimed.obj if claimed.obj.annotations.get(ann.REPLACEMENT) == ours else None


def _launch(recorder: Recorder, choice: ReplacementChoice, node: NodeView, pods: list[PodView]) -> tuple[str, str]:
    deps = recorder.deps
    assert choice.target is not None
    if choice.strategy == "nodeclaim":
        nodepool = deps.kube.get_nodepool(choice.target)
        if nodepool is None:
            raise GpuwardenError(f"NodePool {choice.target} not found")
        manifest, why = nodeclaim_manifest(nodepool, node, pods, recorder.event_id)
        return "nodeclaim/" + deps.kube.create_nodeclaim(manifest), why
    if choice.strategy == "asg":
        return deps.cloud.raise_asg_desired(choice.target, recorder.event_id), "desired capacity +1"
    fleet = deps.policy.replacement
    value = deps.cloud.launch_fleet(recorder.event_id, choice.target, fleet.fleet_instance_types, fleet.fleet_subnets)
    return value, "EC2 Fleet instant, spot first"


def ensure_replacement(recorder: Recorder, node: NodeView, notice: Notice, pods: list[PodView]) -> None:
    deps = recorder.deps
    existing = node.annotations.get(ann.REPLACEMENT)
    if existing and not existing.startswith(PENDING):
        recorder.add("replacement-skipped", reason=f"already launched: {existing}")
        return
    asg = deps.cloud.asg_of(notice.instance_id or node.instance_id or "") if not node.nodepool else None
    choice = choose_replacement(node, asg, deps.policy.replacement)
    if choice.strategy == "none":
        recorder.add("replacement-skipped", reason=choice.reason)
        return
    if existing == PENDING + notice.event_id and choice.strategy == "asg":
        recorder.add("replacement-skipped", reason="an earlier run claimed it and may have raised the group")
        return
    claimed = _claim(recorder, node)
    if claimed is None:
        recorder.add("replacement-skipped", reason="another delivery is launching it")
        return
    try:
        value, why = _launch(recorder, choice, claimed, pods)
    except GpuwardenError as err:
        deps.kube.patch_node(node.name, {"metadata": {"annotations": {ann.REPLACEMENT: None}}}, None)
        recorder.add("replacement-failed", node, strategy=choice.strategy, reason=str(err))
        return
    deps.kube.patch_node(node.name, {"metadata": {"annotations": {ann.REPLACEMENT: value}}}, None)
    recorder.add("replacement", node, target=value, strategy=choice.strategy, reason=why)
