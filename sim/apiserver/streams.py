"""The two answers that outlive a request: a watch (chunked JSON lines until its timeout) and
the ``pods/exec`` upgrade to WebSocket. A mixin of the request handler in ``server``."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import time
from http.server import BaseHTTPRequestHandler
from typing import Protocol

from sim.apiserver import errors
from sim.apiserver.exec_ws import ExecRecord, ExecResult, ExecSession, accept_key, choose_protocol
from sim.apiserver.http_state import Response, ServerState
from sim.apiserver.registry import ResourceType
from sim.apiserver.selectors import field_matcher, matches, parse_field_selector, parse_label_selector

log = logging.getLogger("sim.apiserver.server")


class _Serving(Protocol):
    state: ServerState


class Streams(BaseHTTPRequestHandler):
    server: _Serving  # type: ignore[assignment]

    def _record(self, status: int) -> None:
        raise NotImplementedError  # the request log: the handler's own

    # ------------------------------------------------------------ watch

    def _watch(self, rt: ResourceType, ns: str | None, query: dict[str, list[str]]) -> int:
        state = self.server.state
        labels = parse_label_selector(query.get("labelSelector", [None])[-1])
        fields = field_matcher(parse_field_selector(query.get("fieldSelector", [None])[-1], rt.field_selectors))
        rv = query.get("resourceVersion", [""])[-1]
        timeout = float(query.get("timeoutSeconds", ["1800"])[-1])
        since = int(rv) if rv not in ("", "0") else None
        watcher = state.api.store.watch(rt, ns, since)
        try:
            if since is None:
                items, _ = state.api.list(rt, ns)
                for item in items:
                    watcher.events.put(("ADDED", item))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self._record(200)
            self.end_headers()
            end = time.monotonic() + timeout
            while time.monotonic() < end and not state.stopping.is_set():
                try:
                    event = watcher.events.get(timeout=0.2)
                except queue.Empty:
                    continue
                if event is None:
                    break
                kind, obj = event
                if not (matches(labels, obj["metadata"].get("labels")) and fields(obj)):
                    continue
                if rt.kind == "PodDisruptionBudget":
                    obj = state.api.disruption.decorate(obj)
                line = json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode() + b"\n"
                self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.write(b"0\r\n\r\n")
        finally:
            state.api.store.unwatch(watcher)
        raise Response(200)

    # ------------------------------------------------------------ exec

    def _exec(self, ns: str, name: str, query: dict[str, list[str]]) -> int:
        state = self.server.state
        pods = state.registry.by_kind("pods")
        pod = state.api.get(pods, ns, name)
        containers = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
        container = query.get("container", [""])[-1]
        if not container:
            if len(containers) != 1:
                choices = " ".join(containers)
                raise errors.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{choices}]"
                )
            container = containers[0]
        elif container not in containers:
            raise errors.bad_request(f"container {container} is not valid for pod {name}")
        if not (pod.get("spec") or {}).get("nodeName"):
            raise errors.bad_request(f"pod {name} does not have a host assigned")
        command = query.get("command", [])
        if not command:
            raise errors.bad_request("you must specify at least 1 command")
        if self.headers.get("Upgrade", "").lower() != "websocket" or not self.headers.get("Sec-WebSocket-Key"):
            raise errors.bad_request("Upgrade request required")
        protocol = choose_protocol(self.headers.get_all("Sec-WebSocket-Protocol") or [])
        if protocol is None:
            raise errors.bad_request(
                "unable to upgrade: no supported channel protocol offered "
                "(this simulator speaks v5.channel.k8s.io and v4.channel.k8s.io)"
            )
        record = ExecRecord(
            namespace=ns,
            pod=name,
            container=container,
            command=list(command),
            time=state.clock.now(),
            stdin=query.get("stdin", ["false"])[-1] in ("true", "1"),
            tty=query.get("tty", ["false"])[-1] in ("true", "1"),
            protocol=protocol,
        )
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept_key(self.headers["Sec-WebSocket-Key"]))
        self.send_header("Sec-WebSocket-Protocol", protocol)
        self._record(101)
        self.end_headers()
        self.close_connection = True
        with state.lock:
            state.exec_log.append(record)
        try:
            result = state.exec_handler(record)
        except Exception as exc:  # the handler is test code: report its failure as the command's
            log.exception("sim: exec handler failed")
            result = ExecResult(exit_code=126, stderr=f"exec handler failed: {exc!r}\n")
        session = ExecSession(
            self.connection,
            self.rfile,  # type: ignore[arg-type]
            want_stdout=query.get("stdout", ["true"])[-1] in ("true", "1"),
            want_stderr=query.get("stderr", ["true"])[-1] in ("true", "1"),
        )
        with contextlib.suppress(OSError):
            session.finish(result, list(command))
        raise Response(101)
