"""`spot-interruption`: EC2's two-minute Spot warning (docs/events.md)."""

from gpuwarden.domain.decide import loss_warning
from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.holds import reconcile_holds
from gpuwarden.services.engine.hooks import Admission, KindHooks
from gpuwarden.sources.ec2 import SpotInterruptionWarning
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.SPOT_INTERRUPTION,
    summary="an EC2 Spot instance is reclaimed in two minutes",
    voluntary=False,
    route="interruption",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(
            plan=loss_warning("spot interruption: the instance stops at the deadline"), guard=karpenter.not_stale
        ),
        delivery=karpenter.INVOLUNTARY,
    ),
    handle=disrupt,
    # every replacement's do-not-disrupt hold, whichever kind launched it: this kind has no switch,
    # so the reconcile always takes back a hold left behind (docs/cluster.md, "Replacement capacity")
    reconcile=reconcile_holds,
    models=(SpotInterruptionWarning,),
    rules=lambda _: (
        rule_of("SpotInterruption", "EC2 Spot two-minute interruption warnings", SpotInterruptionWarning),
    ),
    samples=(
        "spot-interruption.json",
        "spot-interruption-empty-time.json",
        "spot-interruption-epoch-time.json",
        "spot-interruption-karpenter.json",
        "spot-interruption-unknown-action.json",
    ),
)
