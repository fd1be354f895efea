"""The checkpoint handshake: ask, deliver (signal / exec / POST), record the answer on the pod."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.checkpoint import CheckpointSpec, checkpoint_by, checkpoint_spec, current_request
from gpuwarden.domain.errors import GpuwardenError, NotFound
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import FanOut, Recorder
from gpuwarden.services.engine.writes import Patch, annotate, update_pod

#: Annotations a kind adds to a pod in the same write that asks it to checkpoint, decided on the
#: pod as that write finds it (a kind's hook; beside Karpenter: its do-not-disrupt mark).
PreparePod = Callable[[Recorder, PodView], Mapping[str, str | None]]


@dataclass(frozen=True)
class Ask:
    """One pod to ask (``spec``), or only to mark (``spec`` None: a gang member on the doomed node
    that waits for its leader). ``doomed``: on the node being disrupted, where the kind's
    `PreparePod` hook applies; a gang's pods on healthy nodes are asked and otherwise left alone."""

    pod: PodView
    spec: CheckpointSpec | None
    gang: str | None = None
    doomed: bool = True


@dataclass(frozen=True)
class _Claimed:
    pod: PodView
    asked: bool
    marked: bool


def _claim(
    recorder: Recorder,
    ask: Ask,
    by: datetime,
    deadline: datetime | None,
    prepare: PreparePod | None,
    since: datetime | None = None,
) -> _Claimed | None:
    """Write the request on the pod (RV-checked), so racing invocations agree without the ledger:
    the writer that wins delivers. A pod that already carries a current request (this notice's,
    or another notice's for the same gang) is not asked again; its time is only moved up to this
    notice's deadline when that is earlier; one acknowledged before ``since`` (this notice's time)
    is no checkpoint for this notice, and the pod is asked again. None: nothing written."""
    event_id = recorder.event_id
    request = {
        ann.CHECKPOINT_REQUESTED: ann.rfc3339(by),
        ann.CHECKPOINT_EVENT: event_id,
        ann.CHECKPOINT_DONE: None,
        ann.CHECKPOINT_FAILED: None,
    }
    outcome = {"asked": False, "marked": False}

    def decide(current: PodView) -> Patch | None:
        extra = dict(prepare(recorder, current)) if prepare is not None and ask.doomed else {}
        outcome["marked"] = bool(extra)
        if ask.spec is None:
            return annotate(extra) if extra else None
        held = current_request(current, event_id, recorder.deps.clock(), since)
        outcome["asked"] = held is None
        if held is None:
            return annotate({**request, **extra})
        if deadline is not None and not held.done and not held.failed and held.by > deadline:
            extra[ann.CHECKPOINT_REQUESTED] = ann.rfc3339(deadline)  # the gang's earliest deadline
        return annotate(extra) if extra else None

    claimed = update_pod(recorder.deps.kube, ask.pod, decide)
    if not claimed.written or claimed.obj is None:
        return None
    return _Claimed(claimed.obj, outcome["asked"], outcome["marked"])


def _deliver(recorder: Recorder, node: NodeView | None, pod: PodView, spec: CheckpointSpec, by: datetime) -> None:
    deps = recorder.deps
    wanted = max(1.0, (by - deps.clock()).total_seconds())
    timeout = max(1.0, deps.time_left(wanted))
    started = time.monotonic()  # the budget is the invocation's own (wall) time
    imagined = False
    try:
        if spec.mode in ("signal", "exec"):
            outcome = deps.kube.exec_in_pod(pod.namespace, pod.name, spec.container, spec.exec_command(), timeout)
            imagined = outcome.imagined
            ran = f"would {spec.mode}" if imagined else f"exit {outcome.exit_code}"
            ok, detail = outcome.exit_code == 0, ran
        elif spec.mode == "http":
            url = f"http://{pod.pod_ip}:{spec.port}{spec.path}"
            status = deps.http.post(url, timeout) if pod.pod_ip else 0
            ok, detail = 200 <= status < 300, f"HTTP {status}" if status else "pod has no IP"
            if deps.dry_run and status:  # the dry run's POST is imagined: no answer to report
                imagined, detail = True, f"would POST {url}"
        else:
            return
    except (GpuwardenError, OSError, ValueError) as err:
        ok, detail = False, f"{type(err).__name__}: {err}"
    recorder.add(
        ActionType.SIGNAL if spec.mode == "signal" else ActionType.CHECKPOINT_DELIVERED,
        pod=pod.key,
        mode=spec.mode,
        result=detail,
    )
    if (spec.mode == "signal" and ok) or imagined:
        return  # the workload acknowledges by annotating its own pod; a dry run's exec has no answer
    if not ok and timeout < wanted and time.monotonic() - started >= timeout * 0.95:
        # cut at the invocation's time budget, not failed: the drain waits for the ack until `by`
        return
    key = ann.CHECKPOINT_DONE if ok else ann.CHECKPOINT_FAILED
    value = ann.rfc3339(deps.clock()) if ok else detail[:200]
    try:
        deps.kube.patch_pod(pod.namespace, pod.name, {"metadata": {"annotations": {key: value}}}, None)
    except NotFound:
        return
    recorder.add(ActionType.CHECKPOINT_ACK if ok else ActionType.CHECKPOINT_FAILED, node, pod=pod.key, reason=detail)


def asks_for(pods: Iterable[PodView], recorder: Recorder) -> list[Ask]:
    """The opted-in pods among ``pods`` that can still answer, each as its own (a gang of one)."""
    policy = recorder.deps.policy.checkpoint
    return [
        Ask(pod, spec)
        for pod in pods
        if isinstance(spec := checkpoint_spec(pod, policy.default_timeout_seconds, policy.allow_exec), CheckpointSpec)
        and not (pod.terminating or pod.finished or pod.is_daemonset)
    ]


@dataclass(frozen=True)
class Asking:
    """One step's asking: who asks (``recorder``), for which doomed ``node``, by when (``deadline``),
    on which workers (``pool``), what a kind adds to a doomed-node pod's request (``prepare``), and
    the Capacity Block's runs it shares the gangs with (``fan_out``), the notice's own time
    (``since``: a request another notice made and saw acknowledged before it is asked again), and
    when the drain began (``joined_since``: a gang member created after it is a rank its controller
    started during the drain, from the checkpoint being written: not asked)."""

    recorder: Recorder
    node: NodeView
    deadline: datetime | None
    pool: ThreadPoolExecutor
    prepare: PreparePod | None = None
    fan_out: FanOut | None = None
    since: datetime | None = None
    joined_since: datetime | None = None


def ask_pods(asking: Asking, asks: list[Ask], sent: threading.Event | None = None) -> list[Future[None]]:
    """Ask (or mark) every pod of ``asks`` at once. Returns the deliveries still running (exec/http
    wait for the answer); ``sent`` is set once every request has been written and its delivery begun."""
    recorder, node, deadline = asking.recorder, asking.node, asking.deadline
    now = recorder.deps.clock()
    left = _Countdown(len(asks), sent)

    def one(ask: Ask) -> None:
        spec = ask.spec
        by = checkpoint_by(now, spec.timeout_seconds if spec else 0, deadline)
        try:
            claimed = _claim(recorder, ask, by, deadline, asking.prepare, asking.since)
            if claimed is None:
                return
            if claimed.marked:
                why = "kept from Karpenter's drain until its checkpoint" + (f" (gang {ask.gang})" if ask.gang else "")
                recorder.add(ActionType.DO_NOT_DISRUPT, pod=ask.pod.key, reason=why)
            if not claimed.asked or spec is None:
                return
            gang = {"gang": ask.gang} if ask.gang else {}
            where = node if ask.doomed else None  # the Event goes on the doomed node only
            recorder.add(
                ActionType.CHECKPOINT_REQUESTED, where, pod=ask.pod.key, mode=spec.mode, by=ann.rfc3339(by), **gang
            )
        finally:
            left.one_done()
        _deliver(recorder, node if ask.doomed else None, claimed.pod, spec, by)

    return [asking.pool.submit(one, ask) for ask in asks]


def request_checkpoints(asking: Asking, pods: list[PodView]) -> list[Future[None]]:
    """Ask every opted-in pod of ``pods`` at once, each as a gang of one (`ask_pods`)."""
    return ask_pods(asking, asks_for(pods, asking.recorder))


class _Countdown:
    """Sets ``event`` once ``count`` requests are out (at once when there are none)."""

    def __init__(self, count: int, event: threading.Event | None) -> None:
        self._left, self._event, self._lock = count, event, threading.Lock()
        if count == 0 and event is not None:
            event.set()

    def one_done(self) -> None:
        with self._lock:
            self._left -= 1
            if self._left == 0 and self._event is not None:
                self._event.set()
