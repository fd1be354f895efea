"""`manual`: one runbook action on one node (docs/cli.md)."""

from gpuwarden.domain.notice import Kind
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.engine.hooks import Admission, KindHooks
from gpuwarden.services.runbook import actions

SPEC = KindSpec(
    kind=Kind.MANUAL,
    summary="an operator's runbook action on one node",
    voluntary=True,  # `force` overrides the windows and do-not-disrupt, never a PDB
    route="runbook",
    doc="docs/cli.md#runbook",
    # the windows and do-not-disrupt refuse it unless forced
    hooks=KindHooks(admission=Admission(guard=actions.manual_guard)),
    samples=("runbook-drain.json", "runbook-plan.json"),
    unrouted="operator",  # a runbook request, `gpuwarden release`, or an input nothing recognises
)
