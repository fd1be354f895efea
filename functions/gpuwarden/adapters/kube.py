"""Kubernetes through the official client: the only importer of `kubernetes`.

The generated API classes validate every argument with pydantic and build model objects for every answer;
on the paths gpuwarden takes (a node, the pods on it, a patch, an eviction) that costs more than the HTTP
round trip. So this adapter serializes requests with the client's own `ApiClient` (its configuration,
auth, TLS and connection pool) and reads answers as JSON into the domain's small views (exec: `stream`).
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from gpuwarden.adapters.api_status import exec_exit_code, is_pdb_refusal, retry_after, status_message
from gpuwarden.adapters.errors import cluster_unreachable
from gpuwarden.adapters.events import event_body, nodepool_ref
from gpuwarden.adapters.paging import Query, T, list_all
from gpuwarden.adapters.rate_limit import RateLimiter
from gpuwarden.domain.actions import EvictionResult
from gpuwarden.domain.errors import Conflict, KubeError, NotFound
from gpuwarden.domain.ports import EvictionOutcome, ExecOutcome
from gpuwarden.domain.views import NodeView, PodView, node_from_json, pod_from_json
from gpuwarden.observability import logger

MERGE_PATCH = "application/merge-patch+json"
JSON = "application/json"
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_KARPENTER = "/apis/karpenter.sh/v1"
_RBAC = "/apis/rbac.authorization.k8s.io/v1"
_RBAC_PLURALS = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings"}


class _Transient(Exception):
    def __init__(self, status: int | None, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class KubeClient:
    """The `KubePort` on a configured `kubernetes.client.ApiClient`."""

    @property
    def _host(self) -> str:
        return str(getattr(getattr(self._api, "configuration", None), "host", "") or "(no host)")

    def __init__(
        self,
        api_client: Any,
        *,
        qps: float = 0.0,
        burst: int = 100,
        attempts: int = 6,
        request_timeout: tuple[float, float] = (3.0, 15.0),
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._api = api_client
        self._limiter = RateLimiter(qps, burst)
        self._attempts = attempts
        self._timeout = request_timeout
        self._sleep = sleep
        self.requests = 0
        self.wire_bytes = 0  # the answers' bytes as they crossed the wire (gzip where the server chose it)

    # -- transport -----------------------------------------------------------------------
    def _once(
        self, method: str, path: str, query: Sequence[tuple[str, str]], body: Any, content_type: str | None
    ) -> tuple[int, bytes, Mapping[str, str]]:
        from urllib3.exceptions import HTTPError

        # answers over 128 KiB come gzipped, urllib3 inflates them (docs/architecture.md, "Lists")
        headers = {"Accept": JSON, "Accept-Encoding": "gzip"}
        if body is not None:
            headers["Content-Type"] = content_type or JSON
        request = self._api.param_serialize(
            method=method,
            resource_path=path,
            query_params=list(query),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        if method != "PATCH" and not path.startswith("/api/v1/nodes"):
            self._limiter.acquire()
        self.requests += 1
        try:
            response = self._api.call_api(*request, _request_timeout=self._timeout)
            data = response.read() or b""
            self.wire_bytes += _wire_bytes(response, data)
        except HTTPError as err:
            raise _Transient(None, f"{method} {path}: {type(err).__name__}: {err}") from err
        status = int(response.status)
        if status in _RETRY_STATUSES and not (status == 429 and is_pdb_refusal(data)):
            message, _ = status_message(data)
            raise _Transient(status, f"{method} {path}: {status} {message}", retry_after(response.headers))
        return status, data, response.headers

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, str]] = (),
        body: Any = None,
        content_type: str | None = None,
    ) -> tuple[int, bytes]:
        """One API call, retried with jittered backoff on 5xx, throttling and broken connections."""
        delay = 0.05
        for attempt in range(1, self._attempts + 1):
            try:
                status, data, _ = self._once(method, path, query, body, content_type)
                return status, data
            except _Transient as err:
                if attempt == self._attempts:
                    if err.status is None:  # never reached the API server
                        raise cluster_unreachable(self._host, err).after_retries() from err
                    raise KubeError(f"{err} (after {attempt} attempts)", status=err.status).after_retries() from err
                wait = err.retry_after if err.retry_after is not None else delay * (0.5 + random.random())  # noqa: S311
                logger.debug("kube retry", extra={"path": path, "attempt": attempt, "error": str(err)})
                self._sleep(wait)
                delay = min(delay * 2, 1.0)
        raise AssertionError("unreachable")

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        status, data = self._request(method, path, **kwargs)
        if status == 404:
            raise NotFound(f"{method} {path}: not found", status=404)
        if status == 409:
            message, _ = status_message(data)
            raise Conflict(f"{method} {path}: {message}", status=409)
        if not 200 <= status < 300:
            message, _ = status_message(data)
            raise KubeError(f"{method} {path}: {status} {message}", status=status)
        result = json.loads(data or b"{}")
        if not isinstance(result, dict):
            raise KubeError(f"{method} {path}: answer is not an object", status=status)
        return result

    def _list(self, path: str, convert: Callable[[dict[str, Any]], T], query: Query = ()) -> list[T]:
        return list_all(lambda q: self._json("GET", path, query=q), convert, query)

    def _items(self, path: str, label_selector: str | None = None) -> list[dict[str, Any]]:
        return self._list(path, dict, [("labelSelector", label_selector)] if label_selector else [])

    # -- nodes ---------------------------------------------------------------------------
    def get_node(self, name: str) -> NodeView | None:
        try:
            return node_from_json(self._json("GET", f"/api/v1/nodes/{name}"))
        except NotFound:
            return None

    def list_nodes(self, label_selector: str | None = None) -> list[NodeView]:
        query = [("labelSelector", label_selector)] if label_selector else []
        return self._list("/api/v1/nodes", node_from_json, query)

    def patch_node(self, name: str, patch: Mapping[str, Any], resource_version: str | None) -> NodeView:
        body = _with_resource_version(patch, resource_version)
        return node_from_json(self._json("PATCH", f"/api/v1/nodes/{name}", body=body, content_type=MERGE_PATCH))

    # -- pods ----------------------------------------------------------------------------
    def list_pods_on_node(self, node: str) -> list[PodView]:
        query = [("fieldSelector", f"spec.nodeName={node}")]
        return self._list("/api/v1/pods", pod_from_json, query)

    def list_pods(self, namespace: str, labels: Mapping[str, str] | None = None) -> list[PodView]:
        selector = ",".join(f"{k}={v}" for k, v in sorted((labels or {}).items()))
        query = [("labelSelector", selector)] if selector else []
        return self._list(f"/api/v1/namespaces/{namespace}/pods", pod_from_json, query)

    def list_pods_where(self, keep: Callable[[PodView], bool]) -> list[PodView]:
        return list_all(lambda q: self._json("GET", "/api/v1/pods", query=q), pod_from_json, keep=keep)

    def get_pod(self, namespace: str, name: str) -> PodView | None:
        try:
            return pod_from_json(self._json("GET", f"/api/v1/namespaces/{namespace}/pods/{name}"))
        except NotFound:
            return None

    def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any], resource_version: str | None) -> PodView:
        body = _with_resource_version(patch, resource_version)
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"
        return pod_from_json(self._json("PATCH", path, body=body, content_type=MERGE_PATCH))

    def evict_pod(self, namespace: str, name: str, uid: str, grace_seconds: int | None) -> EvictionOutcome:
        """Evict the pod with this UID (`deleteOptions.preconditions.uid`): a pod recreated under the
        same name since it was listed is not taken; the API answers 409 and the result is `gone`."""
        options: dict[str, Any] = {"preconditions": {"uid": uid}}
        if grace_seconds is not None:
            options["gracePeriodSeconds"] = grace_seconds
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
            "deleteOptions": options,
        }
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/eviction"
        status, data = self._request("POST", path, body=body)
        if 200 <= status < 300:
            return EvictionOutcome(EvictionResult.EVICTED)
        if status in (404, 409):  # gone, or another pod under the same name now
            return EvictionOutcome(EvictionResult.GONE)
        message, causes = status_message(data)
        if status == 429:
            detail = "; ".join(str(c.get("message", "")) for c in causes if c.get("message"))
            return EvictionOutcome(EvictionResult.BLOCKED, detail or message)
        raise KubeError(f"POST {path}: {status} {message}", status=status)

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int) -> bool:
        """Delete the pod with this UID (DeleteOptions `preconditions.uid`) with this grace. False: that
        pod is gone (404), or the name now belongs to another pod (409)."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": grace_seconds,
            "preconditions": {"uid": uid},
        }
        try:
            self._json("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)
        except (NotFound, Conflict):
            return False
        return True

    def exec_in_pod(
        self, namespace: str, name: str, container: str, command: Sequence[str], timeout: float
    ) -> ExecOutcome:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.stream.ws_client import ERROR_CHANNEL, websocket_call

        # The client's own WebSocket transport, called directly: `kubernetes.stream.stream`
        # swaps `call_api` on the ApiClient it is given while it connects, which would send
        # other threads' plain requests down the WebSocket path.
        configuration = self._api.configuration
        auth = configuration.auth_settings().get("BearerToken")
        headers = {"authorization": auth["value"]} if auth and auth.get("value") else {}
        query = [("command", list(command)), ("container", container), ("stdout", "true"), ("stderr", "true")]
        self.requests += 1
        path = f"/api/v1/namespaces/{namespace}/pods/{name}/exec"
        try:
            ws = websocket_call(  # type: ignore[no-untyped-call]
                configuration,
                "GET",
                f"{configuration.host}{path}",
                query_params=query,
                headers=headers,
                _preload_content=False,
            )
        except ApiException as err:  # the client wraps every handshake failure as status 0
            reason = str(err.reason or err)
            if "Handshake status 404" in reason:
                raise NotFound(f"exec {namespace}/{name}: pod not found", status=404) from err
            raise KubeError(f"exec {namespace}/{name}: {reason[:300]}", status=err.status) from err
        try:
            ws.run_forever(timeout=timeout)
            # what run_forever buffered; timeout=0: a command still running at its timeout must
            # not block the read (the client's default waits for the next frame, without a bound)
            output = (ws.read_stdout(timeout=0) or "") + (ws.read_stderr(timeout=0) or "")
            code = None if ws.is_open() else exec_exit_code(ws.read_channel(ERROR_CHANNEL))
        finally:
            ws.close(timeout=1)  # the close handshake of a command still running is not waited out
        return ExecOutcome(exit_code=-1 if code is None else code, output=output[-2000:])

    # -- events, PDBs, Karpenter ---------------------------------------------------------
    def create_node_event(self, node: NodeView, reason: str, message: str, warning: bool = False) -> None:
        body = event_body(
            {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.name}, reason, message, warning
        )
        self._json("POST", "/api/v1/namespaces/default/events", body=body)

    def create_pod_event(self, pod: PodView, reason: str, message: str, warning: bool = False) -> None:
        ref = {"apiVersion": "v1", "kind": "Pod", "namespace": pod.namespace, "name": pod.name, "uid": pod.uid}
        body = event_body(ref, reason, message, warning)
        body["metadata"]["namespace"] = pod.namespace  # an Event lives in its object's namespace
        self._json("POST", f"/api/v1/namespaces/{pod.namespace}/events", body=body)

    def create_nodepool_event(
        self, nodepool: Mapping[str, Any], reason: str, message: str, warning: bool = False
    ) -> None:
        body = event_body(nodepool_ref(nodepool), reason, message, warning)
        self._json("POST", "/api/v1/namespaces/default/events", body=body)

    def list_pdbs(self, namespace: str) -> list[dict[str, Any]]:
        return self._items(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets")

    def list_pvcs(self, namespace: str) -> list[dict[str, Any]]:
        return self._items(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims")

    def get_pv(self, name: str) -> dict[str, Any] | None:
        try:
            return self._json("GET", f"/api/v1/persistentvolumes/{name}")
        except NotFound:
            return None

    def list_resource_claims(self, namespace: str) -> list[dict[str, Any]]:
        try:
            return self._items(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims")
        except NotFound:  # no resource.k8s.io/v1 (DRA) served: no claim can be allocated
            return []

    def list_daemonsets(self, label_selector: str | None = None) -> list[dict[str, Any]]:  # sizing.py, doctor
        return self._items("/apis/apps/v1/daemonsets", label_selector)

    def get_nodepool(self, name: str) -> dict[str, Any] | None:
        try:
            return self._json("GET", f"{_KARPENTER}/nodepools/{name}")
        except NotFound:
            return None

    def list_nodepools(self) -> list[dict[str, Any]]:
        return self._items(f"{_KARPENTER}/nodepools")

    def patch_nodepool(self, name: str, patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
        """A JSON merge patch (custom resources take no strategic merge), RV-checked when given."""
        body = _with_resource_version(patch, resource_version)
        return self._json("PATCH", f"{_KARPENTER}/nodepools/{name}", body=body, content_type=MERGE_PATCH)

    def patch_nodeclaim(self, name: str, patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
        """A JSON merge patch, RV-checked when given (the replacement's hold, docs/cluster.md)."""
        body = _with_resource_version(patch, resource_version)
        return self._json("PATCH", f"{_KARPENTER}/nodeclaims/{name}", body=body, content_type=MERGE_PATCH)

    def create_nodeclaim(self, body: Mapping[str, Any]) -> str:
        name = str(body["metadata"]["name"])
        try:
            self._json("POST", f"{_KARPENTER}/nodeclaims", body=dict(body))
        except Conflict:
            logger.info("nodeclaim exists already", extra={"nodeclaim": name})
        return name

    # -- cluster RBAC (the cluster-access installer only; not in the gpuwarden ClusterRole) ---
    def apply_cluster_rbac(self, body: Mapping[str, Any]) -> str:
        """Create a ClusterRole/ClusterRoleBinding, or replace the one that exists."""
        plural, name = _RBAC_PLURALS[str(body["kind"])], str(body["metadata"]["name"])
        try:
            self._json("POST", f"{_RBAC}/{plural}", body=dict(body))
        except Conflict:
            current = self._json("GET", f"{_RBAC}/{plural}/{name}")
            metadata = {**body["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
            self._json("PUT", f"{_RBAC}/{plural}/{name}", body={**body, "metadata": metadata})
            return "replaced"
        return "created"

    def delete_cluster_rbac(self, kind: str, name: str) -> bool:
        try:
            self._json("DELETE", f"{_RBAC}/{_RBAC_PLURALS[kind]}/{name}")
        except NotFound:
            return False
        return True

    def get_nodeclaim(self, name: str) -> dict[str, Any] | None:
        try:
            return self._json("GET", f"{_KARPENTER}/nodeclaims/{name}")
        except NotFound:
            return None

    def list_nodeclaims(self) -> list[dict[str, Any]]:
        return self._items(f"{_KARPENTER}/nodeclaims")

    def delete_nodeclaim(self, name: str) -> bool:
        """Ask Karpenter to retire the NodeClaim (its finalizer drains and terminates). False: gone."""
        try:
            self._json("DELETE", f"{_KARPENTER}/nodeclaims/{name}")
        except NotFound:
            return False
        return True


def _wire_bytes(response: Any, data: bytes) -> int:
    """How many bytes the answer took on the wire: urllib3's count (gzip before it was inflated),
    else the body's own length (a client without urllib3 under it)."""
    raw = getattr(response, "response", None)
    tell = getattr(raw, "tell", None)
    return int(tell()) if callable(tell) else len(data)


def _with_resource_version(patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
    if not resource_version:
        return dict(patch)
    return {**patch, "metadata": {**(patch.get("metadata") or {}), "resourceVersion": resource_version}}
