"""Cluster access at deploy time: access entries, the RBAC custom resource, and its installer."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuwarden.adapters.kube import KubeClient
from gpuwarden.domain.errors import KubeError
from gpuwarden.handlers import cluster_access
from gpuwarden.services.doctor import rbac
from tests.infra.conftest import Synth

INSTALLER = "gpuwarden.handlers.cluster_access.handler"


def _by_type(synth: Synth, type_: str) -> dict[str, dict[str, Any]]:
    return synth.resources(type_)


def _gpuwarden_functions(synth: Synth) -> dict[str, dict[str, Any]]:
    return {
        k: v
        for k, v in synth.resources("AWS::Lambda::Function").items()
        if str(v["Properties"].get("Handler", "")).startswith("gpuwarden.handlers.")
        and v["Properties"]["Handler"] != INSTALLER
    }


# --------------------------------------------------------------------------- the template


def test_every_gpuwarden_function_role_has_a_standard_access_entry_in_the_gpuwarden_group(synth: Synth) -> None:
    entries = [e["Properties"] for e in synth.resources("AWS::EKS::AccessEntry").values()]
    grouped = {json.dumps(e["PrincipalArn"]): e for e in entries if e.get("KubernetesGroups")}
    functions = _gpuwarden_functions(synth)
    assert functions
    for fn in functions.values():
        entry = grouped[json.dumps(fn["Properties"]["Role"])]
        assert entry["ClusterName"] == "ml-test"
        assert entry["Type"] == "STANDARD"
        assert entry["KubernetesGroups"] == ["gpuwarden"]
        assert "AccessPolicies" not in entry  # all its rights come from the ClusterRole


def test_only_the_installer_has_an_access_policy_and_it_is_cluster_admin(synth: Synth) -> None:
    with_policies = [
        e["Properties"]
        for e in synth.resources("AWS::EKS::AccessEntry").values()
        if "AccessPolicies" in e["Properties"]
    ]
    (installer,) = [
        v for v in synth.resources("AWS::Lambda::Function").values() if v["Properties"]["Handler"] == INSTALLER
    ]
    (entry,) = with_policies
    assert entry["PrincipalArn"] == installer["Properties"]["Role"]
    assert entry["Type"] == "STANDARD"
    (policy,) = entry["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert json.dumps(policy["PolicyArn"]).endswith(':eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"]]}')


def test_the_custom_resource_applies_the_rendered_rbac_after_the_installers_access_entry(synth: Synth) -> None:
    (logical_id, resource), *_ = synth.resources("Custom::GpuwardenClusterRbac").items()
    props = resource["Properties"]
    assert props["ClusterName"] == "ml-test"
    assert json.loads(props["Documents"]) == rbac.documents(allow_exec=True)
    (installer_entry,) = [
        k for k, e in synth.resources("AWS::EKS::AccessEntry").items() if "AccessPolicies" in e["Properties"]
    ]
    assert installer_entry in resource["DependsOn"]
    # the Provider framework invokes the installer
    framework = synth.template_json["Resources"][props["ServiceToken"]["Fn::GetAtt"][0]]
    assert framework["Type"] == "AWS::Lambda::Function"
    assert logical_id


def test_installer_may_only_describe_the_one_cluster(synth: Synth) -> None:
    (installer,) = [
        v for v in synth.resources("AWS::Lambda::Function").values() if v["Properties"]["Handler"] == INSTALLER
    ]
    role_id = installer["Properties"]["Role"]["Fn::GetAtt"][0]
    statements = [
        st
        for p in synth.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
        for st in p["Properties"]["PolicyDocument"]["Statement"]
    ]
    actions = {a for st in statements for a in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])}
    assert actions == {"eks:DescribeCluster", "logs:CreateLogStream", "logs:PutLogEvents"}
    (eks,) = [st for st in statements if st["Action"] == "eks:DescribeCluster"]
    assert json.dumps(eks["Resource"]).endswith(':cluster/ml-test"]]}')


def test_a_policy_without_exec_renders_no_pods_exec(synth_with: Any) -> None:
    synth = synth_with({"policy": {"checkpoint": {"allow_exec": False}}})
    (resource,) = synth.resources("Custom::GpuwardenClusterRbac").values()
    documents = json.loads(resource["Properties"]["Documents"])
    assert documents == rbac.documents(allow_exec=False)
    assert not rbac.allows(documents[0], "", "pods/exec", "create")


def test_cluster_access_can_be_turned_off(synth_with: Any) -> None:
    synth = synth_with({"clusterAccess": False})
    assert synth.resources("AWS::EKS::AccessEntry") == {}
    assert synth.resources("Custom::GpuwardenClusterRbac") == {}
    assert synth.error is None, synth.error


# --------------------------------------------------------------------------- the installer


@dataclass
class _Response:
    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)

    def read(self) -> bytes:
        return json.dumps(self.body).encode()


@dataclass
class FakeRbacApi:
    """Just enough of kube-apiserver's RBAC endpoints, behind the ApiClient surface KubeClient uses."""

    objects: dict[str, dict[str, Any]] = field(default_factory=dict)
    calls: list[tuple[str, str]] = field(default_factory=list)
    forbidden: int = 0  # answer this many requests 403 first (an access entry not yet propagated)
    version: int = 0

    def param_serialize(self, **kwargs: Any) -> tuple[Any, ...]:
        return (kwargs["method"], kwargs["resource_path"], kwargs.get("body"))

    def call_api(self, method: str, path: str, body: Any, **_: Any) -> _Response:
        self.calls.append((method, path))
        if self.forbidden:
            self.forbidden -= 1
            return _Response(403, {"kind": "Status", "message": "forbidden"})
        self.version += 1
        if method == "POST":
            key = f"{path}/{body['metadata']['name']}"
            if key in self.objects:
                return _Response(409, {"kind": "Status", "message": "already exists"})
            self.objects[key] = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
            return _Response(201, self.objects[key])
        if path not in self.objects:
            return _Response(404, {"kind": "Status", "message": "not found"})
        if method == "GET":
            return _Response(200, self.objects[path])
        if method == "PUT":
            assert body["metadata"]["resourceVersion"] == self.objects[path]["metadata"]["resourceVersion"]
            self.objects[path] = {**body, "metadata": {**body["metadata"], "resourceVersion": str(self.version)}}
            return _Response(200, self.objects[path])
        del self.objects[path]
        return _Response(200, {"kind": "Status", "status": "Success"})


@dataclass
class _Context:
    function_name: str = "installer"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:us-west-2:123456789012:function:installer"
    aws_request_id: str = "req-1"


ROLE = "/apis/rbac.authorization.k8s.io/v1/clusterroles/gpuwarden"
BINDING = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/gpuwarden"


def _event(request: str, documents: list[dict[str, Any]]) -> dict[str, Any]:
    event: dict[str, Any] = {
        "RequestType": request,
        "ResourceProperties": {"ClusterName": "ml-test", "Documents": json.dumps(documents)},
    }
    if request != "Create":
        event["PhysicalResourceId"] = "gpuwarden-rbac/ml-test"
    return event


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeRbacApi:
    fake = FakeRbacApi()
    monkeypatch.setattr(cluster_access, "kube_for", lambda cluster: KubeClient(fake))
    return fake


def test_create_applies_the_role_then_the_binding(api: FakeRbacApi) -> None:
    answer = cluster_access.handler(_event("Create", rbac.documents(allow_exec=True)), _Context())  # type: ignore[arg-type]
    assert answer["PhysicalResourceId"] == "gpuwarden-rbac/ml-test"
    assert [c for c in api.calls if c[0] == "POST"] == [
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles"),
        ("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"),
    ]
    assert api.objects[ROLE]["rules"] == rbac.cluster_role(allow_exec=True)["rules"]
    assert api.objects[BINDING]["subjects"] == [{"apiGroup": rbac.RBAC_API, "kind": "Group", "name": "gpuwarden"}]


def test_update_replaces_what_exists(api: FakeRbacApi) -> None:
    cluster_access.handler(_event("Create", rbac.documents(allow_exec=True)), _Context())  # type: ignore[arg-type]
    answer = cluster_access.handler(_event("Update", rbac.documents(allow_exec=False)), _Context())  # type: ignore[arg-type]
    assert "replaced" in answer["Data"]["Objects"]
    assert api.objects[ROLE]["rules"] == rbac.cluster_role(allow_exec=False)["rules"]
    assert ("PUT", ROLE) in api.calls


def test_delete_removes_the_binding_then_the_role_and_tolerates_absence(api: FakeRbacApi) -> None:
    documents = rbac.documents(allow_exec=True)
    cluster_access.handler(_event("Create", documents), _Context())  # type: ignore[arg-type]
    api.calls.clear()
    answer = cluster_access.handler(_event("Delete", documents), _Context())  # type: ignore[arg-type]
    assert api.calls == [("DELETE", BINDING), ("DELETE", ROLE)]
    assert api.objects == {}
    assert answer["PhysicalResourceId"] == "gpuwarden-rbac/ml-test"
    again = cluster_access.handler(_event("Delete", documents), _Context())  # type: ignore[arg-type]
    assert "absent" in again["Data"]["Objects"]


def test_install_waits_for_a_new_access_entry_then_gives_up() -> None:
    api = FakeRbacApi(forbidden=3)
    waits: list[float] = []
    done = rbac.install(KubeClient(api), rbac.documents(allow_exec=True), sleep=waits.append)
    assert len(waits) == 3
    assert done == ["ClusterRole/gpuwarden: created", "ClusterRoleBinding/gpuwarden: created"]
    never = FakeRbacApi(forbidden=1000)
    with pytest.raises(KubeError) as err:
        rbac.install(KubeClient(never), rbac.documents(allow_exec=True), wait_seconds=10, sleep=lambda _: None)
    assert err.value.status == 403


def test_delete_succeeds_when_the_cluster_no_longer_lets_us_in(
    api: FakeRbacApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    api.forbidden = 10_000
    monkeypatch.setattr(cluster_access, "DELETE_WAIT_SECONDS", 0)
    answer = cluster_access.handler(_event("Delete", rbac.documents(allow_exec=True)), _Context())  # type: ignore[arg-type]
    assert answer["Data"]["Objects"].startswith("left in place")
