"""What the HTTP side holds: the request log's records, the server's state, a resolved route."""

from __future__ import annotations

import json
import socket
import threading
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sim.apiserver.api import Api
from sim.apiserver.exec_ws import ExecHandler, ExecRecord
from sim.apiserver.faults import FaultInjector
from sim.apiserver.registry import Registry, ResourceType
from sim.clock import SimClock


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
    #: gzip answers over 128 KiB for a client that asks, as the real server does (`server.GZIP_THRESHOLD`)
    compress: bool = True


@dataclass
class Route:
    rtype: ResourceType
    namespace: str | None
    name: str | None
    sub: str | None


def resolve(reg: Registry, segments: list[str]) -> Route | None:
    """The resource a request path names (`/api/v1/namespaces/ns/pods/name/status`), or None."""
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


class Response(Exception):
    """Raised by route handlers that already wrote their answer (upgrade, watch, reset)."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status
