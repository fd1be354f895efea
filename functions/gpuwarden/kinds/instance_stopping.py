"""`instance-stopping`: an EC2 instance stopping or terminated (docs/events.md). Its use case records
the loss and runs no sequence, so it declares no hooks (the default `KindHooks`, which plan no step)."""

from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.notices.instance_stopping import handle_instance_stopping
from gpuwarden.sources.ec2 import STOPPING_STATES, InstanceStateChange, why_not_lost
from gpuwarden.sources.rules import rule_of

SPEC = KindSpec(
    kind=Kind.INSTANCE_STOPPING,
    summary="an EC2 instance is stopping or terminated: the node is lost",
    voluntary=False,
    route="interruption",
    doc="docs/events.md#the-kinds",
    handle=handle_instance_stopping,
    models=(InstanceStateChange,),
    rules=lambda _: (
        rule_of(
            "InstanceStopping",
            "EC2 instances stopping or terminating",
            InstanceStateChange,
            detail={"state": list(STOPPING_STATES)},
        ),
    ),
    why_ignored=why_not_lost,
    samples=("instance-state-change-stopping.json", "instance-state-change-terminated.json"),
)
