"""What a kind may change in the one disruption sequence, grouped by the stage that reads it
(docs/architecture.md, "The pipeline"), and the values those hooks are handed:

- **admission** (`Admission`): before any pod is touched — the plan, the guards, the mark's extra
  annotations, the check right after the mark, and the answer when the sequence stops there;
- **delivery** (`Delivery`): the urgent work once the node is marked — what is done to each pod
  before its checkpoint request, whether the replacement is left to Karpenter (and claimed in the
  mark's write), whether the drain workflow starts at once;
- **settlement** (`Settlement`): after every drain round and at the end — the kind's `settle`
  (retire, give back, or as is) and its answer.

A kind's spec (gpuwarden/kinds/) names the stages it changes: ``KindHooks(admission=Admission(...))``.
The sequence (`engine.sequence`) and the rounds (`engine.rounds`) read them here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from gpuwarden.domain.decide import Plan, nothing_to_do
from gpuwarden.domain.gang_progress import Looks
from gpuwarden.domain.gangs import Gang
from gpuwarden.domain.notice import Notice
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.checkpoint import PreparePod
from gpuwarden.services.engine.context import Deps, FanOut, Recorder
from gpuwarden.services.engine.drain import DrainState
from gpuwarden.services.engine.gangs import find_gangs
from gpuwarden.services.engine.node_ops import pods_on
from gpuwarden.services.engine.plan import Plan as DrainPlan
from gpuwarden.services.engine.result import Result

#: The plan of a kind that asks nothing of the node (the default).
NO_STEPS = nothing_to_do("this kind plans no step on the node")

Guard = Callable[["Disruption"], str | None]
Settle = Callable[[Recorder, DrainState], DrainState]
RoundReport = Callable[[DrainState], None]
#: The answer when the sequence stops before acting (not ours, refused, held by another notice).
Stopped = Callable[["Stop"], Result]
#: The answer once the sequence ran, with the reason it ran for.
Answer = Callable[["Disruption", "Marked", "Ran", str], Result]


def no_guard(_: Disruption) -> str | None:
    return None


def no_extra(_: Disruption) -> Mapping[str, str]:
    return {}


def as_is(_: Recorder, state: DrainState) -> DrainState:
    return state


# --------------------------------------------------------------------------- the stages


@dataclass(frozen=True)
class Admission:
    """Before any pod is touched: whether, and how, the node is taken."""

    #: What a notice of the kind asks of the node (cordon, checkpoint, replace, drain) and why.
    plan: Plan = NO_STEPS
    #: Before the mark: a refusal (with its reason) leaves the node untouched.
    guard: Guard = no_guard
    #: Annotations the mark writes with gpuwarden's own (one write).
    mark_extra: Callable[[Disruption], Mapping[str, str]] = no_extra
    #: After the mark, before any pod is touched: a refusal gives the node back.
    after_mark: Guard = no_guard
    #: The answer when the sequence stops here (None: `disrupt.ignored`, with the reason).
    stopped: Stopped | None = None


@dataclass(frozen=True)
class Delivery:
    """Once the node is marked: the checkpoint requests, the replacement, the drain's start."""

    #: Done to each pod just before it is asked to checkpoint.
    prepare_pod: PreparePod | None = None
    #: Why this node's replacement is left to Karpenter (its NodeClaim is being deleted or carries
    #: `DisruptionReason`, or the node is `karpenter.sh/disrupted`): recorded as
    #: `replacement-skipped`, ``left_to: Karpenter``.
    replacement_guard: Guard = no_guard
    #: The mark also writes this event's replacement claim (`replace.mark_claim`): the launch then
    #: needs no write of its own. Only where `replacement_guard` reads the node's NodeClaim right
    #: before the launch, which is where Karpenter says it has begun to replace the node.
    claim_with_mark: bool = False
    #: Deployed: start the drain workflow before the first round, beside the deliveries
    #: (an involuntary notice's drain must not wait for this invocation).
    hand_off_at_once: bool = False


@dataclass(frozen=True)
class Settlement:
    """After every drain round (here and in the drain workflow), and the answer once it ran."""

    #: Retire, give back, or as is.
    settle: Settle = as_is
    #: The answer once it ran (None: `disrupt.result_of`: handled, duplicate or dry-run).
    answer: Answer | None = None


@dataclass(frozen=True)
class KindHooks:
    """What one kind changes in the sequence, stage by stage (its spec's `hooks`:
    gpuwarden/kinds/). The defaults are an involuntary kind's, with no steps planned."""

    admission: Admission = field(default_factory=Admission)
    delivery: Delivery = field(default_factory=Delivery)
    settlement: Settlement = field(default_factory=Settlement)


#: Spot interruptions and rebalance recommendations (and the capacity-reservation kinds): no
#: guard beyond the plan, no settling, the drain workflow started at once.
URGENT = KindHooks(delivery=Delivery(hand_off_at_once=True))


# --------------------------------------------------------------------------- what the hooks see


@dataclass(frozen=True)
class Steps:
    """What this notice asks for once the node is marked."""

    checkpoint: bool = True
    replace: bool = True
    drain: bool = True


@dataclass
class Disruption:
    """One run of the sequence on one node."""

    notice: Notice
    deps: Deps
    node: NodeView
    hooks: KindHooks
    drain_locally: bool = True
    recorder: Recorder = field(init=False)
    #: Called with the state after every drain round this process runs (a terminal's progress).
    on_round: RoundReport | None = None
    #: This run's mark wrote the replacement's claim (`sequence.guard_and_mark`).
    claimed: bool = False
    #: The runs of one Capacity Block side by side in this process (each asks its own node's pods).
    fan_out: FanOut | None = None
    _pods: list[PodView] | None = None
    _gangs: list[Gang] | None = None

    def __post_init__(self) -> None:
        self.recorder = Recorder(self.deps, self.notice.event_id)

    @property
    def pods(self) -> list[PodView]:
        """The pods on the node, listed once when first needed (an involuntary kind cordons first)."""
        if self._pods is None:
            self._pods = pods_on(self.deps.kube, self.node.name)
        return self._pods

    @property
    def pods_listed(self) -> list[PodView]:
        """The pods on the node if this run has listed them already, else none (no LIST for it)."""
        return self._pods or []

    @property
    def gangs(self) -> list[Gang]:
        """The gangs of the node's pods (docs/training-jobs.md), listed once (one LIST per gang) when
        first needed; bad gang input is reported then."""
        if self._gangs is None:
            self._gangs = find_gangs(self.recorder, self.pods, report=True, fan_out=self.fan_out)
        return self._gangs


@dataclass(frozen=True)
class Stop:
    """Why the sequence stops before acting on the node, for the kind's `Admission.stopped`."""

    notice: Notice
    recorder: Recorder
    #: None: the notice names no node of the cluster.
    node: NodeView | None
    reason: str
    #: What the sequence was for (the plan's reason, or the use case's).
    why: str
    #: A guard refused (else: not ours, or another notice holds the node).
    refused: bool = False


@dataclass(frozen=True)
class Marked:
    """What the guards and the mark decided. ``refused``/``held_by`` set: nothing more happens."""

    node: NodeView
    changed: bool = False
    refused: str | None = None
    held_by: str | None = None
    #: The node carried this notice's mark before (a redelivery, or a run the drain workflow resumed).
    resumed: bool = False

    @property
    def stopped(self) -> bool:
        return self.refused is not None or self.held_by is not None

    def held_reason(self) -> str:
        return f"node {self.node.name} is already being handled for {self.held_by}"


@dataclass(frozen=True)
class Ran:
    """What `sequence.run_steps` answers: the drain's state (None: no drain ran here, a dry run or
    a notice that only prepares the node), and where the gangs it asked stand."""

    state: DrainState | None
    looks: Looks = field(default_factory=Looks)
    #: A dry run's drain: what it would do, as its actions recorded it (docs/cli.md#plans).
    plan: DrainPlan | None = None
