"""The checkpoint handshake: ask, deliver (signal / exec / POST), record the answer on the pod."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.actions import ActionType
from gpuwarden.domain.checkpoint import CheckpointSpec, checkpoint_by, checkpoint_spec, requested_for
from gpuwarden.domain.errors import GpuwardenError, NotFound
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.services.engine.context import Recorder
from gpuwarden.services.engine.writes import Patch, annotate, update_pod

#: Annotations a kind adds to a pod in the same write that asks it to checkpoint, decided on the
#: pod as that write finds it (a kind's hook; beside Karpenter: its do-not-disrupt mark).
PreparePod = Callable[[Recorder, PodView], Mapping[str, str | None]]


def _claim(recorder: Recorder, pod: PodView, by: datetime, prepare: PreparePod | None) -> tuple[PodView, bool] | None:
    """Write the request on the pod (RV-checked): the writer that wins delivers; None if another did.
    Also answers whether the write carried the kind's own annotations."""
    event_id = recorder.event_id
    request = {
        ann.CHECKPOINT_REQUESTED: ann.rfc3339(by),
        ann.CHECKPOINT_EVENT: event_id,
        ann.CHECKPOINT_DONE: None,
        ann.CHECKPOINT_FAILED: None,
    }
    extra: dict[str, str | None] = {}

    def decide(current: PodView) -> Patch | None:
        if requested_for(current, event_id):
            return None
        extra.clear()
        extra.update(prepare(recorder, current) if prepare is not None else {})
        return annotate({**request, **extra})

    claimed = update_pod(recorder.deps.kube, pod, decide)
    return (claimed.obj, bool(extra)) if claimed.written and claimed.obj is not None else None


def _deliver(recorder: Recorder, node: NodeView, pod: PodView, spec: CheckpointSpec, by: datetime) -> None:
    deps = recorder.deps
    wanted = max(1.0, (by - deps.clock()).total_seconds())
    timeout = max(1.0, deps.time_left(wanted))
    started = time.monotonic()  # the budget is the invocation's own (wall) time
    try:
        if spec.mode in ("signal", "exec"):
            outcome = deps.kube.exec_in_pod(pod.namespace, pod.name, spec.container, spec.exec_command(), timeout)
            ran = f"would {spec.mode}" if outcome.imagined else f"exit {outcome.exit_code}"
            ok, detail = outcome.exit_code == 0, ran
        elif spec.mode == "http":
            url = f"http://{pod.pod_ip}:{spec.port}{spec.path}"
            status = deps.http.post(url, timeout) if pod.pod_ip else 0
            ok, detail = 200 <= status < 300, f"HTTP {status}" if status else "pod has no IP"
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
    if spec.mode == "signal" and ok:
        return  # the workload acknowledges by annotating its own pod
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


def request_checkpoints(
    recorder: Recorder,
    node: NodeView,
    pods: list[PodView],
    deadline: datetime | None,
    pool: ThreadPoolExecutor,
    prepare: PreparePod | None = None,
    sent: threading.Event | None = None,
) -> list[Future[None]]:
    """Ask every opted-in pod at once. Returns the deliveries still running (exec/http wait for the
    answer); ``sent`` is set once every request has been written and its delivery begun."""
    deps = recorder.deps
    now = deps.clock()
    default_timeout = deps.policy.checkpoint.default_timeout_seconds
    asking = [
        (pod, spec)
        for pod in pods
        if isinstance(spec := checkpoint_spec(pod, default_timeout, deps.policy.checkpoint.allow_exec), CheckpointSpec)
        and not (pod.terminating or pod.finished or pod.is_daemonset or requested_for(pod, recorder.event_id))
    ]
    left = _Countdown(len(asking), sent)

    def ask(pod: PodView, spec: CheckpointSpec) -> None:
        by = checkpoint_by(now, spec.timeout_seconds, deadline)
        try:
            claimed = _claim(recorder, pod, by, prepare)
            if claimed is None:
                return
            asked, marked = claimed
            if marked:
                recorder.add(
                    ActionType.DO_NOT_DISRUPT, pod=pod.key, reason="kept from Karpenter's drain until its checkpoint"
                )
            recorder.add(ActionType.CHECKPOINT_REQUESTED, node, pod=pod.key, mode=spec.mode, by=ann.rfc3339(by))
        finally:
            left.one_done()
        _deliver(recorder, node, asked, spec, by)

    return [pool.submit(ask, pod, spec) for pod, spec in asking]


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
