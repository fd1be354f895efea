"""`karpenter-expiry`: Karpenter expires a node at its NodeClaim's creation + expireAfter; its drain is
planned ahead (docs/cluster.md, "Expiry"; docs/events.md)."""

from gpuwarden.domain.decide import loss_warning
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.karpenter_expiry import doctor, policy
from gpuwarden.kinds.karpenter_expiry import use_case as expiry
from gpuwarden.kinds.spec import KindSpec, plan_due
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.hooks import Admission, KindHooks

SPEC = KindSpec(
    kind=Kind.KARPENTER_EXPIRY,
    summary="Karpenter expires a node (spec.expireAfter): its drain is planned before it",
    # the drain it runs is involuntary (Karpenter's expiry is forceful); before expiry - lead the
    # use case asks the windows and the NodePool's budgets itself (kinds/karpenter_expiry/use_case.py)
    voluntary=False,
    route="scheduled",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(plan=loss_warning("Karpenter expires the node: planned drain before its expireAfter")),
        delivery=karpenter.INVOLUNTARY,
    ),
    switch="karpenter_expiry.enabled",
    policy=policy.SECTION,
    samples=("scheduler-karpenter-expiry-due.json",),
    ticks={expiry.DUE_ACTION: plan_due(expiry.run_expiry_plan)},  # read the NodeClaim again: drain, or plan again
    reconcile=expiry.reconcile_expiries,  # every Karpenter node's expiry, planned
    doctor=doctor.DOCTOR,
)
