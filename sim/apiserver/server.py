"""The HTTP side: routing, discovery, the request log, faults, watch and the exec upgrade."""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import socket
import struct
import time
from datetime import datetime
from http.server import ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from sim.apiserver import errors
from sim.apiserver.api import parse_json
from sim.apiserver.authz import request_attributes
from sim.apiserver.discovery import discovery_doc, no_such_path
from sim.apiserver.faults import Fault, RequestInfo
from sim.apiserver.http_state import RequestRecord, Response, Route, ServerState, resolve
from sim.apiserver.paging import page_of
from sim.apiserver.registry import ResourceType
from sim.apiserver.streams import Streams
from sim.apiserver.tables import to_table, wants_table

log = logging.getLogger("sim.apiserver.server")


#: The API server gzips an answer longer than 128 KiB, at level 1, when the client accepts gzip
#: (k8s.io/apiserver pkg/endpoints/handlers/responsewriters/writers.go: ``defaultGzipThresholdBytes``,
#: ``defaultGzipContentEncodingLevel``; the APIResponseCompression feature, on by default)
GZIP_THRESHOLD = 128 * 1024


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


class SimHandler(Streams):
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
        accepts = "gzip" in (self.headers.get("Accept-Encoding") or "")
        if self.server.state.compress and accepts and len(payload) > GZIP_THRESHOLD:
            payload = gzip.compress(payload, compresslevel=1)
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Vary", "Accept-Encoding")
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
            raise no_such_path()
        return self._dispatch(route, query, body)

    def _discovery(self, segments: list[str]) -> int | None:
        if self.command not in ("GET", "HEAD"):
            return None
        if segments in (["healthz"], ["livez"], ["readyz"]):
            return self._send(200, b"ok", "text/plain; charset=utf-8")
        doc = discovery_doc(self.server.state.registry, segments, self.server.server_address[1])
        return None if doc is None else self._send_json(200, doc)

    def _resolve(self, segments: list[str]) -> Route | None:
        return resolve(self.server.state.registry, segments)

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
                page = page_of(q("limit"), q("continue"))
                if not wants_table(self.headers.get("Accept", "")):
                    encoded = api.list_body(rt, ns, q("labelSelector"), q("fieldSelector"), page)
                    if encoded is not None:
                        return self._send(200, encoded)
                items, rv = api.list(rt, ns, q("labelSelector"), q("fieldSelector"), page)
                doc = api.list_doc(rt, items, rv, page, bool(q("labelSelector") or q("fieldSelector")))
                table = self._maybe_table(rt, items, rv)
                if table is not None:  # kubectl reads a table in chunks (--chunk-size, 500) too
                    table["metadata"] = {**table.get("metadata", {}), **doc["metadata"]}
                return self._send_json(200, table or doc)
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
