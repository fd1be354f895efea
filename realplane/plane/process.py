"""The plane's processes: one program run from the binaries the build made, its log, and its end
(on `Component.stop`, on SIGTERM, and with its parent: each child has a parent-death signal)."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import ssl
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class PlaneError(RuntimeError):
    """One line: which component, what went wrong, where its log is, how to fix it if we know."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Component:
    """One program of the plane: how it is run, where it logs, and its process."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Run the program. From the main thread only: the parent-death signal fires when the
        *thread* that started the child ends (prctl(2)), so a component started from a short-lived
        thread would be killed with it (a restart in a scene's helper thread was, silently)."""
        if threading.current_thread() is not threading.main_thread():
            raise PlaneError(
                f"{self.name}: start it from the main thread (its parent-death signal fires when the "
                f"starting thread ends, {threading.current_thread().name!r} here)"
            )
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own binaries, our own arguments
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,  # its own process group: stop() ends it and its children
                preexec_fn=_die_with_parent,  # runs between fork and exec: no threads there
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_line(self) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def pause(self) -> None:
        """SIGSTOP the program (and its children): it holds its sockets and answers nothing."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, grace: float = 10.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


def bind_failed(log: Path, since: int) -> bool:
    """The component's log, from byte ``since``, says a port it was given was taken."""
    with log.open("rb") as f:
        f.seek(since)
        return b"address already in use" in f.read()


def insecure() -> ssl.SSLContext:
    """For the controller-manager's and scheduler's self-signed health endpoints only."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


_SIGTERM_INSTALLED = False


def stop_on_sigterm() -> None:
    """SIGTERM (CI's or a user's kill) exits through Python, so atexit and finalizers stop the plane."""
    global _SIGTERM_INSTALLED
    if _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _exit_on_signal)
    _SIGTERM_INSTALLED = True


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)
