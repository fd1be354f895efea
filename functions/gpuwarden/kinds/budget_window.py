"""`budget-window`: the policy's budget windows kept in step with the NodePools (docs/windows.md)."""

from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Frozen
from gpuwarden.kinds.spec import KindSpec, PolicySection, Tick, TickCall
from gpuwarden.services.engine.result import Result
from gpuwarden.services.windows import windows


#: The kind's policy section, `nodepool_windows` (docs/policy.md#switches), read with
#: `domain.policy.section_of(policy, NodePoolWindowsPolicy)` (a comment, not a docstring: the
#: policy's schema stays as it was).
class NodePoolWindowsPolicy(Frozen):
    #: switch: the budget windows written to the NodePools (budgets, GPU caps)
    enabled: bool = True


def _reconcile(call: TickCall) -> Result:
    """Open, close, or the periodic reconcile (with every kind's reconcile part: ``call.also``)."""
    return windows.reconcile_windows(call.tick, call.deps, also=call.also)


SPEC = KindSpec(
    kind=Kind.BUDGET_WINDOW,
    summary="a budget window opens or closes, or the periodic reconcile runs",
    voluntary=False,  # it disrupts no node: it writes the NodePools' budgets and limits
    route="scheduled",
    doc="docs/windows.md#budget-windows",
    switch="nodepool_windows.enabled",
    policy=PolicySection("nodepool_windows", NodePoolWindowsPolicy),
    samples=("scheduler-window-open.json",),
    unrouted="scheduler",  # its ticks carry ``"gpuwarden": "budget-window"`` (`sources.ticks`)
    ticks={"open": Tick(_reconcile), "close": Tick(_reconcile), "reconcile": Tick(_reconcile, switched=False)},
)
