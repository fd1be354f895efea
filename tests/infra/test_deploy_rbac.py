"""The gpuwarden ClusterRole and the kube adapter cannot drift apart.

1. Every request the real services make (a Spot interruption driven through ``handle_batch``
   against the simulator, every checkpoint mode included) is allowed by the rendered ClusterRole.
2. Every path ``KubeClient`` can build (read from its source) is allowed, and every
   (apiGroup, resource, verb) the ClusterRole grants is needed by one of them.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlencode

import pytest

from gpuwarden.adapters import kube as kube_adapter
from gpuwarden.domain.policy import Policy
from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.doctor import rbac
from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.clock import rfc3339
from sim.wiring import sim_deps
from tests.integration.conftest import load_event
from tests.integration.scenarios import checkpoint_server, spot_node

HTTP_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
#: subresources opened by a WebSocket GET; Kubernetes >= 1.35 also checks `create` on them
STREAMING = frozenset({"pods/exec", "pods/attach", "pods/portforward"})
#: adapter paths that are not the gpuwarden group's: the cluster-access installer's RBAC writes
#: (that function's access entry carries the AmazonEKSClusterAdminPolicy instead)
INSTALLER_ONLY = (kube_adapter._RBAC,)

Access = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def required(method: str, path: str, query: str = "") -> set[Access]:
    """What the API server authorizes for one request (kube-apiserver's RequestInfo, simplified)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api":
        group, rest = "", parts[2:]
    elif parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        raise AssertionError(f"not a resource path: {path}")
    if rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    resource, name = rest[0], (rest[1] if len(rest) > 1 else None)
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    verb = {
        "GET": "get" if name else ("watch" if "true" in parse_qs(query).get("watch", []) else "list"),
        "POST": "create",
        "PUT": "update",
        "PATCH": "patch",
        "DELETE": "delete" if name else "deletecollection",
    }[method]
    needed = {(group, resource, verb)}
    if resource in STREAMING:
        needed.add((group, resource, "create"))
    return needed


def granted(role: dict[str, object]) -> set[Access]:
    return {
        (group, resource, verb)
        for rule in role["rules"]  # type: ignore[attr-defined]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


# --------------------------------------------------------------------------- the adapter's paths


def _render(node: ast.expr, constants: dict[str, str]) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name) and node.id in constants:
        return constants[node.id]
    if isinstance(node, ast.JoinedStr):
        return "".join(_render(v, constants) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        return _render(node.value, constants)
    return "{x}"  # a name, an object's name, the host: a path segment filled in at run time


#: KubeClient's list helpers (adapters/paging.list_all underneath): their first argument is the collection's path
_LIST_HELPERS = ("_list", "_items")


def adapter_calls() -> list[tuple[str, str]]:
    """(method, path) for every call in KubeClient that passes an HTTP method and a path literal."""
    tree = ast.parse(Path(kube_adapter.__file__).read_text())
    constants = {
        target.id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    (client,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KubeClient"]
    calls = []
    for method in (n for n in client.body if isinstance(n, ast.FunctionDef)):
        if method.name in _LIST_HELPERS:  # the one pager: it GETs whatever path its callers give it
            continue
        # a path built into a local first (`path = f"..."`) counts as that f-string
        local = dict(constants)
        for node in ast.walk(method):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.JoinedStr):
                local.update({t.id: _render(node.value, constants) for t in node.targets if isinstance(t, ast.Name)})
        for call in (n for n in ast.walk(method) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr in _LIST_HELPERS:
                path = _render(call.args[0], local)  # a LIST through the pager: a GET of the collection
                assert "/api" in path, f"{method.name}: cannot read the path of {ast.unparse(call)}"
                calls.append(("GET", path[path.index("/api") :]))
                continue
            for i, arg in enumerate(call.args[:-1]):
                if isinstance(arg, ast.Constant) and arg.value in HTTP_METHODS:
                    path = _render(call.args[i + 1], local)
                    assert "/api" in path, f"{method.name}: cannot read the path of {ast.unparse(call)}"
                    calls.append((str(arg.value), path[path.index("/api") :]))
    return calls


def test_the_scan_finds_the_calls_it_should() -> None:
    # the scan is honest: it sees the calls we know are there (incl. the WebSocket exec)
    calls = set(adapter_calls())
    assert ("GET", "/api/v1/nodes/{x}") in calls
    assert ("POST", "/api/v1/namespaces/{x}/pods/{x}/eviction") in calls
    assert ("GET", "/api/v1/namespaces/{x}/pods/{x}/exec") in calls
    assert ("POST", "/apis/karpenter.sh/v1/nodeclaims") in calls
    assert ("GET", "/api/v1/nodes") in calls  # a LIST, through the pager
    assert len(calls) >= 15


def test_every_path_the_adapter_can_build_is_allowed() -> None:
    role = rbac.cluster_role(allow_exec=True)
    for method, path in adapter_calls():
        if path.startswith(INSTALLER_ONLY):
            continue
        for group, resource, verb in required(method, path):
            assert rbac.allows(role, group, resource, verb), (
                f"{method} {path} needs {verb} on {group or 'core'}/{resource}: add it to services/doctor/rbac.py RULES"
            )


def test_every_rule_in_the_cluster_role_is_used_by_an_adapter_call() -> None:
    used = {
        access
        for method, path in adapter_calls()
        if not path.startswith(INSTALLER_ONLY)
        for access in required(method, path)
    }
    unused = granted(rbac.cluster_role(allow_exec=True)) - used
    assert not unused, f"the ClusterRole grants what no adapter call needs: {sorted(unused)}"


def test_exec_is_granted_only_when_the_policy_allows_exec() -> None:
    with_exec = granted(rbac.cluster_role(allow_exec=True))
    without = granted(rbac.cluster_role(allow_exec=False))
    assert with_exec - without == {("", "pods/exec", "get"), ("", "pods/exec", "create")}


def test_nothing_is_granted_on_secrets_or_rbac_and_no_wildcards() -> None:
    for group, resource, verb in granted(rbac.cluster_role(allow_exec=True)):
        assert "*" not in (group, resource, verb)
        assert resource not in {"secrets", "configmaps", "serviceaccounts"}
        assert group != rbac.RBAC_API
        assert verb not in {"escalate", "bind", "impersonate"}


def test_binding_names_the_role_and_the_group() -> None:
    binding = rbac.cluster_role_binding()
    assert binding["roleRef"] == {"apiGroup": rbac.RBAC_API, "kind": "ClusterRole", "name": "gpuwarden"}
    assert binding["subjects"] == [{"apiGroup": rbac.RBAC_API, "kind": "Group", "name": "gpuwarden"}]


# --------------------------------------------------------------------------- the real services


@pytest.fixture
def sim(monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeSim]:
    from moto import mock_aws

    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-west-2",
        "POWERTOOLS_METRICS_NAMESPACE": "GpuwardenTest",
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    with mock_aws(), KubeSim(clock_speed=20.0) as running:
        yield running


def test_a_spot_interruption_makes_only_requests_the_cluster_role_allows(sim: KubeSim) -> None:
    # Given a Spot node with trainers in every checkpoint mode, a PDB, a DaemonSet and a mirror pod
    Workloads(sim, delay=1.0).install()
    policy = Policy(cluster="ml-prod")
    deps = sim_deps(sim, caller="test", policy=policy)
    with checkpoint_server() as endpoint:
        spot_node(sim, http_port=endpoint.port)
        sim.clear_requests()
        # When the warning is handled to the end (cordon, checkpoints, NodeClaim, drain)
        event = load_event("spot-interruption.json", time=rfc3339(sim.clock.now()))
        result = handle_batch(parse_notices(event), deps).to_json()
    assert result["outcome"] == "handled", result
    # Then every request it made is allowed by the ClusterRole rendered for this policy
    role = rbac.cluster_role(allow_exec=policy.checkpoint.allow_exec)
    seen = {(r.method, r.path, urlencode(r.query, doseq=True)) for r in sim.requests}
    kinds = {access for method, path, query in seen for access in required(method, path, query)}
    assert ("", "pods/exec", "get") in kinds  # the signal/exec modes were exercised
    assert ("", "pods/eviction", "create") in kinds
    assert ("karpenter.sh", "nodeclaims", "create") in kinds
    denied = sorted(
        (method, path, access)
        for method, path, query in seen
        for access in required(method, path, query)
        if not rbac.allows(role, *access)
    )
    assert not denied, denied
    assert os.environ.get("KUBECONFIG") is None
