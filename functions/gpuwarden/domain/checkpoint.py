"""The checkpoint handshake a pod opts into with `gpuwarden.io/checkpoint` (docs/cluster.md)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from dateutil.parser import isoparse

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.views import PodView

Mode = Literal["signal", "exec", "http", "annotate"]

#: Signals a workload may ask for. `kill -s NAME 1` runs in the checkpoint container.
SIGNALS = frozenset({"SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGWINCH"})
_HTTP = re.compile(r"^(?P<port>[0-9]{1,5})(?P<path>/[A-Za-z0-9._~!$&'()*+,;=:@%/-]*)?$")
MAX_TIMEOUT_SECONDS = 3600


@dataclass(frozen=True)
class CheckpointSpec:
    mode: Mode
    container: str
    timeout_seconds: int
    signal: str | None = None
    command: tuple[str, ...] = ()
    port: int | None = None
    path: str = "/"

    def exec_command(self) -> tuple[str, ...]:
        """What runs in the container: the signal to PID 1, or the user's command (no shell)."""
        if self.mode == "signal":
            assert self.signal is not None
            return ("kill", "-s", self.signal.removeprefix("SIG"), "1")
        return self.command


@dataclass(frozen=True)
class BadCheckpoint:
    """The pod asked for a handshake gpuwarden cannot perform: it is evicted without one."""

    reason: str


def _mode_spec(value: str) -> tuple[Mode, dict[str, object]] | BadCheckpoint:
    mode, _, arg = value.partition(":")
    mode = mode.strip()
    if mode == "annotate" and not arg:
        return "annotate", {}
    if mode == "signal":
        name = arg.strip().upper()
        name = name if name.startswith("SIG") else "SIG" + name
        if name not in SIGNALS:
            return BadCheckpoint(f"signal {arg!r} is not one of {', '.join(sorted(SIGNALS))}")
        return "signal", {"signal": name}
    if mode == "exec":
        try:
            command = tuple(shlex.split(arg))
        except ValueError as err:
            return BadCheckpoint(f"exec command does not parse: {err}")
        if not command:
            return BadCheckpoint("exec: needs a command")
        return "exec", {"command": command}
    if mode == "http":
        match = _HTTP.match(arg.strip())
        if not match or not 0 < int(match["port"]) < 65536:
            return BadCheckpoint(f"http target {arg!r} is not PORT/PATH")
        return "http", {"port": int(match["port"]), "path": match["path"] or "/"}
    return BadCheckpoint(f"unknown checkpoint mode {value!r} (signal:, exec:, http:, annotate)")


def checkpoint_spec(
    pod: PodView, default_timeout: int = 60, allow_exec: bool = True
) -> CheckpointSpec | BadCheckpoint | None:
    """The pod's handshake, a reason it cannot have one, or None when it did not opt in."""
    value = pod.annotations.get(ann.CHECKPOINT)
    if value is None:
        return None
    parsed = _mode_spec(value)
    if isinstance(parsed, BadCheckpoint):
        return parsed
    mode, fields = parsed
    if mode in ("signal", "exec") and not allow_exec:
        return BadCheckpoint(f"{mode} checkpoints need pods/exec, which the policy turns off")
    container = pod.annotations.get(ann.CHECKPOINT_CONTAINER) or (pod.containers[0] if pod.containers else "")
    if mode in ("signal", "exec") and container not in pod.containers:
        return BadCheckpoint(f"checkpoint container {container!r} is not a container of this pod")
    raw_timeout = pod.annotations.get(ann.CHECKPOINT_TIMEOUT)
    timeout = default_timeout
    if raw_timeout is not None:
        if not re.fullmatch(r"[0-9]{1,9}", raw_timeout.strip()):  # not str.isdigit(): "²" is a digit too
            return BadCheckpoint(f"checkpoint timeout {raw_timeout!r} is not a whole number of seconds")
        timeout = min(int(raw_timeout), MAX_TIMEOUT_SECONDS)
    return CheckpointSpec(mode=mode, container=container, timeout_seconds=timeout, **fields)  # type: ignore[arg-type]


def checkpoint_by(requested_at: datetime, timeout_seconds: int, deadline: datetime | None) -> datetime:
    """The pod's own checkpoint deadline, never later than the event's."""
    wanted = requested_at + timedelta(seconds=timeout_seconds)
    return min(wanted, deadline) if deadline is not None else wanted


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return isoparse(value)
    except ValueError:
        return None


def requested_by(pod: PodView) -> datetime | None:
    return _parse_time(pod.annotations.get(ann.CHECKPOINT_REQUESTED))


def acknowledged(pod: PodView, event_id: str) -> bool:
    """The workload (or gpuwarden, for exec/http) recorded the checkpoint for this event's request."""
    return (
        pod.annotations.get(ann.CHECKPOINT_EVENT) == event_id
        and _parse_time(pod.annotations.get(ann.CHECKPOINT_DONE)) is not None
    )


def delivery_failed(pod: PodView, event_id: str) -> str | None:
    if pod.annotations.get(ann.CHECKPOINT_EVENT) != event_id:
        return None
    return pod.annotations.get(ann.CHECKPOINT_FAILED)


def requested_for(pod: PodView, event_id: str) -> bool:
    return pod.annotations.get(ann.CHECKPOINT_EVENT) == event_id and requested_by(pod) is not None


#: How long after the time it asked for a request made for another notice still counts as the
#: pod's current one: a later notice for the same gang (another of its nodes, a Capacity Block's
#: other nodes, a burst of warnings) waits for that request's answer instead of asking again.
SHARE_SECONDS = 600


@dataclass(frozen=True)
class Request:
    """The checkpoint request a pod carries, as it stands."""

    event_id: str
    by: datetime
    done: bool
    failed: str | None

    def shared(self, event_id: str) -> bool:
        """Made for another notice (this one waits for its answer)."""
        return self.event_id != event_id


def current_request(pod: PodView, event_id: str, now: datetime, since: datetime | None = None) -> Request | None:
    """The request this notice counts as the pod's: its own (however old), or another notice's
    until `SHARE_SECONDS` after the time that one asked for, and only while that one was not
    acknowledged before ``since`` (this notice's time): a checkpoint written before the notice
    arrived leaves the work trained since unsaved, so the pod is asked again
    (docs/training-jobs.md). None: the pod is to be asked."""
    by = requested_by(pod)
    if by is None:
        return None
    asker = pod.annotations.get(ann.CHECKPOINT_EVENT, "")
    done_at = _parse_time(pod.annotations.get(ann.CHECKPOINT_DONE))
    if asker != event_id:
        if now >= by + timedelta(seconds=SHARE_SECONDS):
            return None
        if done_at is not None and since is not None and done_at < since:
            return None
    return Request(asker, by, done_at is not None, pod.annotations.get(ann.CHECKPOINT_FAILED) or None)
