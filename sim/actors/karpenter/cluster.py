"""The one client every Karpenter controller here shares, as Karpenter's controllers share one
manager's client: HTTP to the simulator with Karpenter's user agent, the record of what was done,
the offerings the interruption controller marked unavailable, and the cloud provider's
``Delete`` (an instance's termination, begun once, done after ``terminate_seconds``)."""

from __future__ import annotations

import http.client
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import quote, urlsplit

from sim.actors.karpenter.objects import USER_AGENT, KarpenterAction, Obj
from sim.apiserver.errors import ApiError
from sim.apiserver.http_state import Route, resolve

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim


class Settings(Protocol):
    """Karpenter's settings, read by the controllers each time they act (a test may change them)."""

    interruption_queue: bool
    launch_seconds: float
    terminate_seconds: float
    batch_idle_seconds: float


class _Client:
    """A minimal JSON client of the simulator (keep-alive, one connection, Karpenter's user agent)."""

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._conn: http.client.HTTPConnection | None = None

    def call(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"User-Agent": USER_AGENT, "Accept": "application/json", "Authorization": "Bearer sim-token"}
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):
            if self._conn is None:
                self._conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
            try:
                self._conn.request(method, path, body=data, headers=headers)
                response = self._conn.getresponse()
                raw = response.read()
                break
            except (ConnectionError, http.client.HTTPException):
                self._conn.close()
                self._conn = None
                if attempt == 2:
                    raise
        answer = json.loads(raw) if raw else {}
        if response.status >= 400:
            raise ApiError(response.status, str(answer.get("message", "")), answer.get("reason"), answer.get("details"))
        return answer

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class Cluster:
    """What the controllers share: the client, the settings, the action record, the cloud provider."""

    sim: KubeSim
    settings: Settings
    actions: list[KarpenterAction]
    #: (instance type, zone, capacity type) marked unavailable by Spot interruptions
    unavailable: set[tuple[str, str, str]]
    on_action: Callable[[KarpenterAction], None] | None = None
    #: instance id -> when its termination began
    terminating: dict[str, datetime] = field(default_factory=dict)
    #: read the simulator's store in-process instead of over HTTP (the outcome runs: a week at 740
    #: nodes lists every node, NodeClaim and pod at each step; docs/simulate.md#at-ten-times-the-cluster).
    #: The same objects, selected by the same code as the server's answer; writes still go over HTTP
    direct_reads: bool = False
    _client: _Client | None = None

    def http(self) -> _Client:
        if self._client is None:
            self._client = _Client(self.sim.url)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def items(self, path: str, field_selector: str | None = None) -> list[Obj]:
        if self.direct_reads:
            route = self._route(path)
            return self.sim.api.list_shared(route.rtype, route.namespace, field_selector)
        query = f"?fieldSelector={quote(field_selector)}" if field_selector else ""
        return list(self.http().call("GET", path + query).get("items") or [])

    def get(self, path: str) -> Obj | None:
        try:
            if self.direct_reads:
                route = self._route(path)
                assert route.name is not None
                return self.sim.api.get(route.rtype, route.namespace, route.name)
            return dict(self.http().call("GET", path))
        except ApiError as err:
            if err.code == 404:
                return None
            raise

    def _route(self, path: str) -> Route:
        route = resolve(self.sim.registry, [s for s in path.split("/") if s])
        if route is None:
            raise ApiError(404, f"the server could not find the requested resource ({path})", "NotFound")
        return route

    def record(self, now: datetime, type_: str, target: str, detail: str = "", decided_on: str = "") -> None:
        action = KarpenterAction(now, type_, target, detail, decided_on)
        self.actions.append(action)
        if self.on_action is not None:
            self.on_action(action)

    def patch(self, path: str, body: Obj, content_type: str = "application/merge-patch+json") -> bool:
        """A patch; False when it lost an optimistic-lock race (409) or the object is gone (404)."""
        try:
            self.http().call("PATCH", path, body, content_type)
        except ApiError as err:
            if err.code in (404, 409):
                return False
            raise
        return True

    def delete(self, path: str, options: Obj | None = None) -> bool:
        try:
            self.http().call("DELETE", path, options or {})
        except ApiError as err:
            if err.code == 404:
                return False
            raise
        return True

    def instance_gone(self, instance_id: str, claim: str, now: datetime) -> bool:
        """``cloudProvider.Delete``: the first call starts the termination; gone after terminate_seconds."""
        began = self.terminating.get(instance_id)
        if began is None:
            self.terminating[instance_id] = began = now
            self.record(now, "instance-terminating", instance_id, f"nodeclaim {claim}")
        return now >= began + timedelta(seconds=self.settings.terminate_seconds)

    def terminations_due(self) -> list[datetime]:
        return [t + timedelta(seconds=self.settings.terminate_seconds) for t in self.terminating.values()]


def claim_for(node: Obj, claims: list[Obj]) -> Obj | None:
    """The node's NodeClaim, by providerID; None for none or several (no single source of truth)."""
    provider = (node.get("spec") or {}).get("providerID")
    found = [c for c in claims if provider and (c.get("status") or {}).get("providerID") == provider]
    return found[0] if len(found) == 1 else None
