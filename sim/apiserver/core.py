"""``KubeSim``: the simulator's front door."""

from __future__ import annotations

import builtins
import contextlib
import json
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from sim.apiserver import errors
from sim.apiserver.api import MERGE_PATCH, Api
from sim.apiserver.authz import Authorizer
from sim.apiserver.exec_ws import ExecHandler, ExecRecord, default_exec_handler
from sim.apiserver.faults import FaultInjector
from sim.apiserver.http_state import RequestRecord, ServerState
from sim.apiserver.registry import Registry, ResourceType
from sim.apiserver.server import SimHTTPServer
from sim.apiserver.store import ChangeListener, Obj, Store
from sim.clock import SimClock
from sim.stepped import SteppedClock

TOKEN = "sim-token"  # noqa: S105 - a dummy bearer token; the simulator checks none
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class KubeSim:
    """An in-process Kubernetes API server on 127.0.0.1 (random port), plain HTTP."""

    #: The cluster its kubeconfig names: the policy's of the tests and the sandbox (gpuwarden checks
    #: the kubeconfig's cluster against the policy's: docs/cli.md#the-right-cluster)
    cluster_name = "ml-prod"

    def __init__(self, clock_speed: float = 1.0, clock: SimClock | None = None) -> None:
        self.clock = clock or SimClock(clock_speed)
        self.registry = Registry()
        self.store = Store(self.registry, self.clock)
        self.api = Api(self.store, self.registry)
        self.faults = FaultInjector(self.clock)
        self._state = ServerState(self.api, self.registry, self.clock, self.faults, default_exec_handler)
        self._server: SimHTTPServer | None = None
        self._threads: builtins.list[threading.Thread] = []
        self._on_stop: builtins.list[Callable[[], None]] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.kubeconfig_path = Path()
        self.url = ""
        for ns in SYSTEM_NAMESPACES:
            self.api.ensure_namespace(ns)
        self.clock.subscribe(self.store.deadline_changed.set)
        if isinstance(self.clock, SteppedClock):  # grace periods end inside the sleep that reaches them
            self.clock.add_timed(self.store.next_deadline, self.store.reap)

    # ------------------------------------------------------------ lifecycle

    def start(self) -> KubeSim:
        if self._server is not None:
            return self
        self._server = SimHTTPServer(self._state)
        port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{port}"
        self._tmp = tempfile.TemporaryDirectory(prefix="kubesim-")
        self.kubeconfig_path = Path(self._tmp.name) / "kubeconfig"
        self.kubeconfig_path.write_text(json.dumps(self.kubeconfig(), indent=2))
        serve = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1}, name="kubesim-http", daemon=True
        )
        reaper = threading.Thread(target=self._reap_loop, name="kubesim-reaper", daemon=True)
        self._threads = [serve, reaper]
        for t in self._threads:
            t.start()
        return self

    def on_stop(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` when the server stops: an actor's pending work (a workload's delayed
        acknowledgement) ends with its cluster instead of writing into the next one's process."""
        self._on_stop.append(callback)

    def stop(self) -> None:
        if self._server is None:
            return
        for callback in self._on_stop:
            callback()
        self._state.stopping.set()
        self.store.deadline_changed.set()
        self._server.shutdown()
        with self._state.lock:
            live = list(self._state.connections)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        self._server.server_close()
        for t in self._threads:
            t.join(timeout=2)
        self._server = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> KubeSim:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _reap_loop(self) -> None:
        stepped = isinstance(self.clock, SteppedClock)  # its sleeps reap (sim/stepped.py)
        while not self._state.stopping.is_set():
            if not stepped:
                self.store.reap()
            wait = 0.05
            deadline = self.store.next_deadline()
            if deadline is not None:
                real = self.clock.real_seconds_until(deadline)
                if real is not None:
                    wait = min(wait, max(real, 0.001))
            self.store.deadline_changed.wait(wait)
            self.store.deadline_changed.clear()

    # ------------------------------------------------------------ clients

    def kubeconfig(self) -> dict[str, Any]:
        """The kubeconfig document (JSON is valid YAML; kubectl and the Python client read it)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": self.cluster_name, "cluster": {"server": self.url}}],
            "users": [{"name": "kubesim", "user": {"token": TOKEN}}],
            "contexts": [
                {
                    "name": "kubesim",
                    "context": {"cluster": self.cluster_name, "user": "kubesim", "namespace": "default"},
                }
            ],
            "current-context": "kubesim",
            "preferences": {},
        }

    def api_client(self) -> Any:
        """A ``kubernetes.client.ApiClient`` for this simulator (no kubeconfig parsing)."""
        from kubernetes import client

        config = client.Configuration()
        config.host = self.url
        config.api_key = {"authorization": f"Bearer {TOKEN}"}
        return client.ApiClient(config)

    # ------------------------------------------------------------ direct store access

    def rtype(self, kind: str, api_version: str | None = None) -> ResourceType:
        """A resource type by kind ("Pod"), plural ("pods"), short name ("po") or "plural.group"."""
        return self.registry.by_kind(kind, api_version)

    def create(self, obj: Obj) -> Obj:
        """Store ``obj`` as a kubelet/controller would (status kept); fills uid, resourceVersion,
        creationTimestamp; creates its namespace when missing. 409 ``ApiError`` if it exists."""
        rtype = self.rtype(str(obj["kind"]), obj.get("apiVersion"))
        return self.api.create(rtype, (obj.get("metadata") or {}).get("namespace"), obj, strict=False)

    def get(self, kind: str, name: str, namespace: str | None = None) -> Obj | None:
        rtype = self.rtype(kind)
        try:
            return self.api.get(rtype, namespace or ("default" if rtype.namespaced else None), name)
        except errors.ApiError:
            return None

    def list(
        self,
        kind: str,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> builtins.list[Obj]:
        items, _ = self.api.list(self.rtype(kind), namespace, label_selector, field_selector)
        return items

    def patch_direct(
        self, kind: str, name: str, patch: Any, namespace: str | None = None, patch_type: str = MERGE_PATCH
    ) -> Obj:
        """Patch any part of an object, status included (default: JSON merge patch)."""
        rtype = self.rtype(kind)
        return self.api.patch(
            rtype,
            namespace or ("default" if rtype.namespaced else None),
            name,
            patch_type,
            patch,
            subresource="*",
        )

    def delete_direct(
        self, kind: str, name: str, namespace: str | None = None, grace_seconds: int | None = None
    ) -> Obj:
        """Delete like the API would (scheduled pods terminate gracefully on the sim clock)."""
        rtype = self.rtype(kind)
        options = {} if grace_seconds is None else {"gracePeriodSeconds": grace_seconds}
        body, _ = self.api.delete(rtype, namespace or ("default" if rtype.namespaced else None), name, options)
        return body

    def on_change(self, callback: ChangeListener) -> None:
        """Call ``callback(kind, event_type, obj)`` after every write (ADDED, MODIFIED, DELETED),
        outside the store lock and in the writer's thread: it may write to the store itself."""
        self.store.add_listener(callback)

    # ------------------------------------------------------------ observation

    @property
    def authorizer(self) -> Authorizer:
        """Who may do what: everything unless a test says otherwise (``deny``, ``restrict_to``)."""
        return self.api.authorizer

    @property
    def requests(self) -> builtins.list[RequestRecord]:
        with self._state.lock:
            return list(self._state.requests)

    def clear_requests(self) -> None:
        with self._state.lock:
            self._state.requests.clear()

    @property
    def exec_log(self) -> builtins.list[ExecRecord]:
        with self._state.lock:
            return list(self._state.exec_log)

    @property
    def exec_handler(self) -> ExecHandler:
        return self._state.exec_handler

    @exec_handler.setter
    def exec_handler(self, handler: ExecHandler) -> None:
        self._state.exec_handler = handler

    def wait_until(self, predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.01) -> bool:
        """Poll ``predicate`` until true or ``timeout`` real seconds passed; returns its last value."""
        end = time.monotonic() + timeout
        while True:
            if predicate():
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(interval)
