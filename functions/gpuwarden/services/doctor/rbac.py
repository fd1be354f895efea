"""The Kubernetes RBAC gpuwarden's functions need, rendered from one table, and its installer.

Every gpuwarden function role is mapped by an EKS access entry to the Kubernetes group
``gpuwarden``; the ClusterRole below is bound to that group. It holds only what
``adapters/kube.py`` can ask for (tests/infra/test_deploy_rbac.py keeps the two in step).

The installer (``handlers/cluster_access.py``, a CloudFormation custom resource) applies the
rendered documents on Create/Update and removes them on Delete.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypedDict, Unpack

from gpuwarden.domain.errors import KubeError
from gpuwarden.observability import logger

GROUP = "gpuwarden"
NAME = "gpuwarden"
RBAC_API = "rbac.authorization.k8s.io"
_LABELS = {"app.kubernetes.io/name": "gpuwarden", "app.kubernetes.io/managed-by": "gpuwarden-cluster-access"}


@dataclass(frozen=True)
class Rule:
    api_group: str  # "" is the core group
    resource: str  # "pods" or "pods/eviction"
    verbs: tuple[str, ...]
    why: str
    #: only rendered when the policy allows the exec/signal checkpoint modes
    exec_only: bool = False


#: The one table: (apiGroup, resource, verbs) and the adapter calls that need them.
RULES: tuple[Rule, ...] = (
    Rule("", "nodes", ("get", "list", "patch"), "get_node, list_nodes, patch_node (cordon, taint, annotations)"),
    Rule(
        "",
        "pods",
        ("get", "list", "patch", "delete"),
        "list_pods_on_node, list_pods (a gang, by label selector), get_pod, patch_pod, delete_pod",
    ),
    Rule("", "pods/eviction", ("create",), "evict_pod (policy/v1 Eviction)"),
    Rule(
        "",
        "pods/exec",
        ("get", "create"),
        "exec_in_pod over WebSocket: a GET upgrade (authorized as get), and since Kubernetes 1.35 "
        "also checked as create (AuthorizePodWebsocketUpgradeCreatePermission)",
        exec_only=True,
    ),
    Rule(
        "",
        "events",
        ("create",),
        "create_node_event (GpuwardenCordoned, PodEvicted, ...), create_pod_event (CheckpointGangInvalid)",
    ),
    Rule("policy", "poddisruptionbudgets", ("list",), "list_pdbs"),
    Rule("", "persistentvolumeclaims", ("list",), "list_pvcs (a replacement's zonal volume pin)"),
    Rule("", "persistentvolumes", ("get",), "get_pv (the zone a bound volume's node affinity allows)"),
    Rule("resource.k8s.io", "resourceclaims", ("list",), "list_resource_claims (DRA devices a replacement keeps)"),
    Rule("apps", "daemonsets", ("list",), "list_daemonsets (the DaemonSet pods a replacement's requests count)"),
    Rule(
        "karpenter.sh",
        "nodepools",
        ("get", "list", "patch"),
        "get_nodepool (NodeClaim template), list_nodepools, patch_nodepool (window budgets and GPU caps)",
    ),
    Rule(
        "karpenter.sh",
        "nodeclaims",
        ("get", "create", "list", "patch", "delete"),
        "get_nodeclaim (a node's own, by its owner reference), create_nodeclaim (replacement capacity), "
        "list_nodeclaims, patch_nodeclaim (the replacement's do-not-disrupt hold), "
        "delete_nodeclaim (retire an idle node)",
    ),
)


def rules(*, allow_exec: bool) -> list[Rule]:
    return [rule for rule in RULES if allow_exec or not rule.exec_only]


def cluster_role(*, allow_exec: bool) -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": NAME, "labels": dict(_LABELS)},
        "rules": [
            {"apiGroups": [rule.api_group], "resources": [rule.resource], "verbs": list(rule.verbs)}
            for rule in rules(allow_exec=allow_exec)
        ],
    }


def cluster_role_binding() -> dict[str, Any]:
    return {
        "apiVersion": f"{RBAC_API}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": NAME, "labels": dict(_LABELS)},
        "roleRef": {"apiGroup": RBAC_API, "kind": "ClusterRole", "name": NAME},
        "subjects": [{"apiGroup": RBAC_API, "kind": "Group", "name": GROUP}],
    }


def documents(*, allow_exec: bool) -> list[dict[str, Any]]:
    """What the installer applies, in order (the role before the binding that names it)."""
    return [cluster_role(allow_exec=allow_exec), cluster_role_binding()]


def allows(role: Mapping[str, Any], api_group: str, resource: str, verb: str) -> bool:
    """Does this rendered ClusterRole allow ``verb`` on ``api_group``/``resource``?"""
    return any(
        api_group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in role["rules"]
    )


# -- installer ---------------------------------------------------------------------------------


class RbacPort(Protocol):
    def apply_cluster_rbac(self, body: Mapping[str, Any]) -> str: ...
    def delete_cluster_rbac(self, kind: str, name: str) -> bool: ...


#: EKS access entries take a few seconds to reach the API server: 401/403 are retried this long
ACCESS_WAIT_SECONDS = 180.0
_UNAUTHORIZED = frozenset({401, 403})


class AccessWait(TypedDict, total=False):
    """How long a 401/403 is waited out (a new EKS access entry), and how to sleep meanwhile."""

    wait_seconds: float
    sleep: Callable[[float], None]


def install(kube: RbacPort, docs: Sequence[Mapping[str, Any]], **wait: Unpack[AccessWait]) -> list[str]:
    """Create or replace each document; answers ``["ClusterRole/gpuwarden: created", ...]``."""
    done = []
    for doc in docs:
        outcome = _authorized(partial(kube.apply_cluster_rbac, doc), **wait)
        done.append(f"{doc['kind']}/{doc['metadata']['name']}: {outcome}")
    logger.info("cluster rbac applied", extra={"objects": done})
    return done


def uninstall(kube: RbacPort, docs: Sequence[Mapping[str, Any]], **wait: Unpack[AccessWait]) -> list[str]:
    """Delete each document, the binding first; an object already gone is fine."""
    done = []
    for doc in reversed(docs):
        kind, name = str(doc["kind"]), str(doc["metadata"]["name"])
        deleted = _authorized(partial(kube.delete_cluster_rbac, kind, name), **wait)
        done.append(f"{kind}/{name}: {'deleted' if deleted else 'absent'}")
    logger.info("cluster rbac removed", extra={"objects": done})
    return done


def _authorized(
    call: Callable[[], Any], wait_seconds: float = ACCESS_WAIT_SECONDS, sleep: Callable[[float], None] = time.sleep
) -> Any:
    waited, delay = 0.0, 2.0
    while True:
        try:
            return call()
        except KubeError as err:
            if err.status not in _UNAUTHORIZED or waited >= wait_seconds:
                raise
            logger.info("waiting for the EKS access entry", extra={"status": err.status, "waited": waited})
            sleep(delay)
            waited += delay
            delay = min(delay * 1.5, 15.0)
