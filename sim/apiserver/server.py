"""The HTTP side: routing, discovery, the request log, faults, watch and the exec upgrade."""

from __future__ import annotations

import contextlib
import json
import logging
import queue
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sim.apiserver import errors
from sim.apiserver.api import Api, parse_json
from sim.apiserver.authz import request_attributes
from sim.apiserver.exec_ws import (
    ExecHandler,
    ExecRecord,
    ExecResult,
    ExecSession,
    accept_key,
    choose_protocol,
)
from sim.apiserver.faults import Fault, FaultInjector, RequestInfo
from sim.apiserver.registry import Registry, ResourceType
from sim.apiserver.selectors import field_matcher, matches, parse_field_selector, parse_label_selector
from sim.apiserver.tables import to_table, wants_table
from sim.clock import SimClock

log = logging.getLogger("sim.apiserver.server")

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T00:00:00Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def _no_such_path() -> errors.ApiError:
    return errors.ApiError(404, "the server could not find the requested resource", "NotFound", {})


def discovery_doc(reg: Registry, segments: list[str], port: int) -> dict[str, Any] | None:
    """/version, /api, /api/v1, /apis, /apis/<g>, /apis/<g>/<v>; None for other paths.

    /openapi/* answers 404: kubectl's get, cordon, drain, annotate, taint and exec do not need it.
    """
    if segments == ["version"]:
        return VERSION
    if segments == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}],
        }
    if segments == ["apis"]:
        return reg.group_list()
    if segments == ["api", "v1"]:
        return reg.resource_list("", "v1")
    if segments and segments[0] in ("openapi", "swagger.json"):
        raise _no_such_path()
    if len(segments) not in (2, 3) or segments[0] != "apis":
        return None
    if len(segments) == 2:
        versions = [v for g, v in reg.groups() if g == segments[1]]
        if not versions:
            raise _no_such_path()
        return reg.group_doc(segments[1], versions[0])
    doc = reg.resource_list(segments[1], segments[2])
    if doc is None:
        raise _no_such_path()
    return doc


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    query: dict[str, list[str]]
    status: int  # 0: the connection was dropped by a fault
    started: datetime  # sim time
    duration: float  # real seconds
    user_agent: str
    content_type: str = ""
    fault: bool = False
    body: bytes = b""  # as sent (write requests); `payload` reads it

    @property
    def payload(self) -> Any:
        """The request body as JSON (None when there was none)."""
        return json.loads(self.body) if self.body else None


@dataclass
class ServerState:
    api: Api
    registry: Registry
    clock: SimClock
    faults: FaultInjector
    exec_handler: ExecHandler
    requests: list[RequestRecord] = field(default_factory=list)
    exec_log: list[ExecRecord] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    connections: set[socket.socket] = field(default_factory=set)


@dataclass
class Route:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


class Response(Exception):
    """Raised by route handlers that already wrote their answer (upgrade, watch, reset)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


class SimHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    #: socketserver's default listen backlog is 5: a burst of new connections (a pool of execs,
    #: a client's connection pool filling) overflows it and the kernel drops SYNs, which clients
    #: retry after 1 s. A real API server listens with the system's somaxconn (4096).
    request_queue_size = 1024

    def __init__(self, state: ServerState) -> None:
        self.state = state
        super().__init__(("127.0.0.1", 0), SimHandler)


class SimHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    server: SimHTTPServer

    # ------------------------------------------------------------ plumbing

    def setup(self) -> None:
        super().setup()
        with self.server.state.lock:
            self.server.state.connections.add(self.connection)

    def finish(self) -> None:
        with self.server.state.lock:
            self.server.state.connections.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        log.debug(format, *args)

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            return self.rfile.read(length)
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            return b"".join(chunks)
        return b""

    def _send(
        self,
        code: int,
        payload: bytes,
        content_type: str = "application/json",
        headers: dict[str, str] | None = None,
    ) -> int:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.send_header("Cache-Control", "no-cache, private")
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self._record(code)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        return code

    def _send_json(self, code: int, body: Any, headers: dict[str, str] | None = None) -> int:
        return self._send(code, json.dumps(body, separators=(",", ":")).encode(), headers=headers)

    def _reset(self) -> None:
        self._record(0)
        self.close_connection = True
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass

    # ------------------------------------------------------------ request cycle

    def _handle(self) -> None:
        state = self.server.state
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query, keep_blank_values=True)
        self._pending: tuple[float, datetime, str, dict[str, list[str]]] | None = (
            time.perf_counter(),
            state.clock.now(),
            path,
            query,
        )
        self._faulted = False
        self._body = b""
        status = 500
        try:
            body = self._body = self._read_body()
            fault = state.faults.match(RequestInfo(self.command, path, query, body))
            if fault is not None:
                self._faulted = True
                answered = self._apply_fault(fault)
                if answered is not None:
                    status = answered
                    return
            status = self._route(path, query, body)
        except Response as done:
            status = done.status
        except errors.ApiError as exc:
            status = self._send_json(exc.code, exc.status(), exc.headers)
        except (ConnectionError, BrokenPipeError, TimeoutError):
            status, self.close_connection = 0, True
        except Exception as exc:  # a bug in the simulator: answer like an apiserver panic would
            log.exception("sim: unhandled error for %s %s", self.command, self.path)
            status = self._send_json(500, errors.ApiError(500, f"Internal error occurred: {exc!r}").status())
        finally:
            self._record(status)

    def _record(self, status: int) -> None:
        """Log the request once; called just before the answer's last bytes go out, so a client
        that has its answer always finds the request in ``sim.requests``."""
        if self._pending is None:
            return
        t0, started, path, query = self._pending
        self._pending = None
        record = RequestRecord(
            method=self.command,
            path=path,
            query=query,
            status=status,
            started=started,
            duration=time.perf_counter() - t0,
            user_agent=self.headers.get("User-Agent", ""),
            content_type=self.headers.get("Content-Type", ""),
            fault=self._faulted,
            body=self._body,
        )
        with self.server.state.lock:
            self.server.state.requests.append(record)

    def _apply_fault(self, fault: Fault) -> int | None:
        """Returns the status written (0: connection dropped), or None to answer normally."""
        if fault.latency:
            time.sleep(fault.latency)
        if fault.reset:
            self._reset()
            return 0
        if fault.status is None:
            return None  # latency only: continue normally
        headers = {}
        details: dict[str, Any] | None = None
        if fault.retry_after is not None:
            headers["Retry-After"] = str(fault.retry_after)
            details = {"retryAfterSeconds": fault.retry_after}
        if fault.causes:
            details = (details or {}) | {"causes": [dict(c) for c in fault.causes]}
        message = fault.message or f"injected fault: HTTP {fault.status}"
        err = errors.ApiError(fault.status, message, details=details, headers=headers)
        return self._send_json(err.code, err.status(), err.headers)

    # ------------------------------------------------------------ routing

    def _route(self, path: str, query: dict[str, list[str]], body: bytes) -> int:
        segments = [s for s in path.split("/") if s]
        doc = self._discovery(segments)
        if doc is not None:
            return doc
        route = self._resolve(segments)
        if route is None:
            raise _no_such_path()
        return self._dispatch(route, query, body)

    def _discovery(self, segments: list[str]) -> int | None:
        if self.command not in ("GET", "HEAD"):
            return None
        if segments in (["healthz"], ["livez"], ["readyz"]):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        doc = discovery_doc(self.server.state.registry, segments, self.server.server_address[1])
        return None if doc is None else self._send_json(200, doc)

    def _resolve(self, segments: list[str]) -> Route | None:
        reg = self.server.state.registry
        if segments[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", segments[2:]
        elif len(segments) >= 3 and segments[0] == "apis":
            group, version, rest = segments[1], segments[2], segments[3:]
        else:
            return None
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and not (len(rest) == 3 and rest[2] in ("status", "finalize")):
            namespace, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            return None
        rtype = reg.lookup(group, version, rest[0])
        if rtype is None or (namespace is not None and not rtype.namespaced):
            return None
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in {s for s, _, _ in rtype.subresources}:
            return None
        if rtype.namespaced and namespace is None and name is not None:
            return None
        return Route(rtype, namespace, name, sub)

    def _dispatch(self, route: Route, query: dict[str, list[str]], body: bytes) -> int:  # noqa: C901
        api = self.server.state.api
        method = self.command
        rt, ns, name, sub = route.rtype, route.namespace, route.name, route.sub

        def q(key: str) -> str | None:
            return query.get(key, [None])[-1]

        api.authorizer.check(
            request_attributes(method, rt.group, rt.plural, sub, ns, name, q("watch") in ("true", "1"))
        )
        if sub == "exec":
            if method not in ("GET", "POST"):
                raise errors.method_not_allowed()
            assert ns is not None
            assert name is not None
            return self._exec(ns, name, query)
        if name is None:
            if method in ("GET", "HEAD"):
                if q("watch") in ("true", "1"):
                    return self._watch(rt, ns, query)
                if not wants_table(self.headers.get("Accept", "")):
                    encoded = api.list_body(rt, ns, q("labelSelector"), q("fieldSelector"))
                    if encoded is not None:
                        return self._send(200, encoded)
                items, rv = api.list(rt, ns, q("labelSelector"), q("fieldSelector"))
                return self._send_json(200, self._maybe_table(rt, items, rv) or api.list_doc(rt, items, rv))
            if method == "POST":
                return self._send_json(201, api.create(rt, ns, parse_json(body)))
            if method == "DELETE":
                return self._delete_collection(rt, ns, query, body)
            raise errors.method_not_allowed()
        if sub == "eviction":
            if method != "POST":
                raise errors.method_not_allowed()
            assert ns is not None
            return self._send_json(201, api.evict(ns, name, parse_json(body)))
        if method in ("GET", "HEAD"):
            obj = api.get(rt, ns, name)
            table = None if sub else self._maybe_table(rt, [obj], obj["metadata"]["resourceVersion"])
            return self._send_json(200, table or obj)
        if method == "PUT":
            return self._send_json(200, api.replace(rt, ns, name, parse_json(body), sub))
        if method == "PATCH":
            return self._send_json(
                200, api.patch(rt, ns, name, self.headers.get("Content-Type", ""), parse_json(body), sub)
            )
        if method == "DELETE":
            options = parse_json(body) or {}
            if q("gracePeriodSeconds") is not None:
                options["gracePeriodSeconds"] = int(str(q("gracePeriodSeconds")))
            result, code = api.delete(rt, ns, name, options)
            return self._send_json(code, result)
        raise errors.method_not_allowed()

    def _maybe_table(self, rt: ResourceType, items: list[dict[str, Any]], rv: str) -> dict[str, Any] | None:
        if not wants_table(self.headers.get("Accept", "")):
            return None
        return to_table(rt, items, rv, self.server.state.clock.now())

    def _delete_collection(self, rt: ResourceType, ns: str | None, query: dict[str, list[str]], body: bytes) -> int:
        api = self.server.state.api
        items, _ = api.list(rt, ns, query.get("labelSelector", [None])[-1], query.get("fieldSelector", [None])[-1])
        options = parse_json(body) or {}
        deleted = []
        for item in items:
            try:
                _obj, _ = api.delete(rt, item["metadata"].get("namespace"), item["metadata"]["name"], options)
                deleted.append(item)
            except errors.ApiError:
                continue
        return self._send_json(200, api.list_doc(rt, deleted, api.store.resource_version))

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
