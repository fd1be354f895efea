"""The replacement's hold (docs/cluster.md, "Replacement capacity"): ``karpenter.sh/do-not-disrupt``
and ``gpuwarden.io/hold-until`` on a replacement NodeClaim gpuwarden launches, and the one way to
take it back (`take_back_hold`), which the drain's last round (`release_hold_of`) and the periodic
reconcile (`release_holds`) both call. Only a NodeClaim carrying ``gpuwarden.io/hold-until`` is
ever touched: an owner's own do-not-disrupt stays."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from dateutil.parser import isoparse

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.errors import NotFound
from gpuwarden.domain.ports import KubePort
from gpuwarden.domain.views import DO_NOT_DISRUPT, NodeView
from gpuwarden.domain.wording import count
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.writes import annotate

NODECLAIM = "nodeclaim/"


def held(manifest: dict[str, Any], recorder: Recorder) -> dict[str, Any]:
    """The NodeClaim with gpuwarden's hold: ``karpenter.sh/do-not-disrupt: "true"`` (Karpenter's
    registration copies it to the node) until ``replacement.hold_minutes`` from now, so its
    emptiness consolidation does not take the node before the pods it was launched for arrive."""
    minutes = recorder.deps.policy.replacement.hold_minutes
    until = ann.rfc3339(recorder.deps.clock() + timedelta(minutes=minutes))
    notes = manifest["metadata"].setdefault("annotations", {})
    notes |= {DO_NOT_DISRUPT: "true", ann.HOLD_UNTIL: until}
    return manifest


def _in_use(kube: KubePort, node: str) -> bool:
    """A workload pod (not a DaemonSet's, not a mirror) runs on ``node``."""
    return any(
        p.started and not p.is_daemonset and not p.is_mirror and not p.terminating for p in kube.list_pods_on_node(node)
    )


def take_back_hold(
    recorder: Recorder,
    claim: dict[str, Any],
    *,
    reason: str | None = None,
    every_mark: bool = False,
    node_name: str | None = None,
) -> str | None:
    """Take back gpuwarden's hold on the NodeClaim ``claim`` (as read from the API) when a workload
    pod runs on its node or its ``gpuwarden.io/hold-until`` has passed, or at once when the caller
    gives its ``reason`` (the replacement is no longer wanted): from the claim and from its node,
    recorded as `hold-released` with the reason. ``node_name``: the claim's node when its
    ``status.nodeName`` is not written yet. Answers the claim's name, or None: the hold stays, or
    the claim carries none of gpuwarden's."""
    kube, now = recorder.deps.kube, recorder.deps.clock()
    meta = claim.get("metadata") or {}
    notes = meta.get("annotations") or {}
    until = notes.get(ann.HOLD_UNTIL)
    # every_mark (`gpuwarden release`): every gpuwarden.io/ annotation of the claim goes too, since
    # Karpenter's registration copies a claim's annotations onto its node (docs/rollback.md)
    ours = [k for k in notes if k.startswith(ann.PREFIX)] if every_mark else [ann.HOLD_UNTIL]
    if until is None and not (every_mark and ours):
        return None
    name, node = str(meta.get("name")), (claim.get("status") or {}).get("nodeName") or node_name
    used = reason is None and bool(node) and _in_use(kube, str(node))
    if reason is None and not used and isoparse(str(until)) > now:
        return None
    hold = [DO_NOT_DISRUPT] if until is not None else []  # an owner's own do-not-disrupt stays
    with contextlib.suppress(NotFound):
        kube.patch_nodeclaim(name, annotate(dict.fromkeys([*hold, *ours])), None)
    if node and hold:
        with contextlib.suppress(NotFound):
            kube.patch_node(str(node), annotate({DO_NOT_DISRUPT: None}), None)
    why = reason or (f"its pods run on {node}" if used else f"replacement.hold_minutes passed at {until}")
    recorder.add(ActionType.HOLD_RELEASED, target=NODECLAIM + name, reason=why)
    return name


def release_holds(
    recorder: Recorder, *, reason: str | None = None, node: str | None = None, nodes: Sequence[NodeView] = ()
) -> list[str]:
    """The reconcile: take back the hold of every replacement gpuwarden launched whose pods run on
    it now, or whose ``replacement.hold_minutes`` have passed (one LIST of the NodeClaims). With a
    ``reason`` (`gpuwarden release`): every hold at once, with every mark of the claim; with
    ``node``, only the claim of that node. ``nodes``, as the caller read them, name a claim's node
    before its ``status.nodeName`` does: the node carries the claim's annotations, do-not-disrupt
    too, from the moment it exists (a provider that creates it from the claim, as the KWOK
    provider does) or Karpenter registers it, and Karpenter writes ``status.nodeName`` after that;
    its owner reference or, before that, its providerID (the claim's since launch) names it.
    Answers the claims released."""
    owned = {n.nodeclaim: n.name for n in nodes if n.nodeclaim}
    by_provider = {n.provider_id: n.name for n in nodes if n.provider_id}

    def node_of(claim: dict[str, Any]) -> str | None:
        status = claim.get("status") or {}
        owner = owned.get(str((claim.get("metadata") or {}).get("name")))
        return status.get("nodeName") or owner or by_provider.get(str(status.get("providerID") or ""))

    claims = [c for c in recorder.deps.kube.list_nodeclaims() if node is None or node_of(c) == node]
    released = [
        take_back_hold(recorder, c, reason=reason, every_mark=reason is not None, node_name=node_of(c)) for c in claims
    ]
    return [name for name in released if name is not None]


def release_hold_of(recorder: Recorder, node: NodeView) -> None:
    """The drain's last round: the hold of the replacement ``node``'s record names (the node as
    the round read it; one GET of the claim by name), taken back when its pods already run there."""
    record = node.annotations.get(ann.REPLACEMENT) or ""
    claim = recorder.deps.kube.get_nodeclaim(record.removeprefix(NODECLAIM)) if record.startswith(NODECLAIM) else None
    if claim is not None:
        take_back_hold(recorder, claim)


def reconcile_holds(recorder: Recorder, hooks: object, drain_locally: bool, planned: list[Any]) -> str:
    """The periodic reconcile's part (`KindSpec.reconcile`): a hold the drain's last round left
    behind (its pods were not there yet) is taken back once they are, or its time has passed."""
    released = release_holds(recorder)
    return f"; {count(len(released), 'replacement hold')} released" if released else ""
