"""A team's own CDK app with the `Gpuwarden` construct (infra/construct.py; docs/deploy.md, "In your own
CDK app"): the app defines its cluster (aws_eks_v2, which synthesizes offline and needs no kubectl
layer) and adds gpuwarden for it, and for a second cluster by name, in the same stack. Nothing clashes,
each gpuwarden may touch only its own cluster, and cdk-nag, cfn-lint and checkov find nothing in
gpuwarden's part of the template (the team's own VPC and cluster are theirs to answer for).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aws_cdk import App, Stack, Validations
from aws_cdk import aws_eks_v2 as eks
from cdk_nag import AwsSolutionsChecks

from infra import checkov
from infra.config import SettingsError
from infra.construct import Gpuwarden
from tests.infra.conftest import iam_statements

STACK = "MlPlatform"
#: one synth of a VPC, a cluster and two gpuwardens, then cfn-lint and checkov on ~280 resources
pytestmark = pytest.mark.timeout(1200)


@dataclass
class UserApp:
    outdir: Path
    template: dict[str, Any]
    stack: Stack
    cluster: eks.Cluster
    wardens: dict[str, Gpuwarden]  # by cluster name
    error: Exception | None

    @property
    def template_path(self) -> Path:
        return self.outdir / f"{STACK}.template.json"

    def ids(self, cluster: str) -> set[str]:
        """Logical ids of the resources of the gpuwarden for ``cluster``: CDK starts each with the
        construct's id (the team's own resources here start with ``Training``)."""
        prefix = self.wardens[cluster].node.id
        return {logical_id for logical_id in self.template["Resources"] if logical_id.startswith(prefix)}


def _users_app(outdir: Path) -> UserApp:
    """What a team writes (README, "In your own CDK app"), plus the cdk-nag checks they may run."""
    app = App(outdir=str(outdir), context={"aws:cdk:bundling-stacks": []})  # as `cdk ls`: no layer build
    stack = Stack(app, STACK)
    cluster = eks.Cluster(stack, "Training", cluster_name="ml-a", version=eks.KubernetesVersion.V1_34)
    wardens = {
        "ml-a": Gpuwarden(stack, "Gpuwarden", cluster=cluster, policy={"alerts": {"LowGPUUtilization": "gpu-idle"}}),
        "ml-b": Gpuwarden(stack, "Inference", cluster="ml-b", alarm_email="sre@example.com", customer_managed_key=True),
    }
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as exc:  # cdk-nag findings fail the synth through the validation plugin
        error = exc
    template = json.loads((outdir / f"{STACK}.template.json").read_text())
    return UserApp(outdir, template, stack, cluster, wardens, error)


@pytest.fixture(scope="module")
def users_app(tmp_path_factory: pytest.TempPathFactory) -> UserApp:
    return _users_app(tmp_path_factory.mktemp("users-app"))


def test_two_clusters_in_one_stack_name_nothing_twice(users_app: UserApp) -> None:
    names: list[str] = []
    for resource in users_app.template["Resources"].values():
        props = resource.get("Properties", {})
        for key in ("LogGroupName", "DashboardName", "AlarmName", "Name", "FunctionName", "TableName"):
            if isinstance(props.get(key), str):
                names.append(f"{resource['Type']}:{props[key]}")
    assert names  # the log groups, dashboards, alarms and scan schedules are named
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
    dashboards = [n for n in names if n.startswith("AWS::CloudWatch::Dashboard")]
    assert sorted(dashboards) == [
        f"AWS::CloudWatch::Dashboard:{STACK}-Gpuwarden-gpuwarden",
        f"AWS::CloudWatch::Dashboard:{STACK}-Inference-gpuwarden",
    ]


def test_each_gpuwarden_may_touch_only_its_own_cluster(users_app: UserApp) -> None:
    resources = users_app.template["Resources"]
    for mine, other in (("ml-a", "ml-b"), ("ml-b", "ml-a")):
        ids = users_app.ids(mine)
        statements = iam_statements(resources, ids)
        text = json.dumps(statements)
        assert f"kubernetes.io/cluster/{mine}" in text  # scaling/termination by this cluster's tag
        assert f":cluster/{mine}" in text or f'"{mine}"' in text  # eks:DescribeCluster on its own cluster
        assert other not in text, f"the gpuwarden of {mine} grants something on cluster {other}"
        entries = [resources[i] for i in ids if resources[i]["Type"] == "AWS::EKS::AccessEntry"]
        assert entries
        assert {e["Properties"]["ClusterName"] for e in entries} == {mine}


def test_gpuwarden_waits_for_the_cluster_it_is_given(users_app: UserApp) -> None:
    cluster_id = users_app.stack.get_logical_id(users_app.cluster.node.default_child)  # type: ignore[arg-type]
    entries = [
        resource
        for logical_id, resource in users_app.template["Resources"].items()
        if logical_id in users_app.ids("ml-a") and resource["Type"] == "AWS::EKS::AccessEntry"
    ]
    assert entries
    assert all(cluster_id in resource.get("DependsOn", []) for resource in entries)


def test_cdk_nag_finds_nothing_in_gpuwarden(users_app: UserApp) -> None:
    report = json.loads((users_app.outdir / "validation-report.json").read_text())
    ours = [
        (violation["ruleName"], path)
        for plugin in report.get("pluginReports", [])
        for violation in plugin.get("violations", [])
        for r in violation.get("violatingResources", violation.get("violatingConstructs", []))
        for path in [r.get("constructPath", "")]
        if path.startswith((f"{STACK}/Gpuwarden/", f"{STACK}/Inference/"))
    ]
    assert ours == []
    (nag,) = [p for p in report["pluginReports"] if p["pluginName"] == "AwsSolutions"]
    assert nag["suppressedViolations"]  # gpuwarden's own acknowledgements travelled with it


def test_cfn_lint_passes_on_the_users_template(users_app: UserApp) -> None:
    cfn_lint = shutil.which("cfn-lint") or str(Path(sys.executable).with_name("cfn-lint"))
    proc = subprocess.run(
        [cfn_lint, "--ignore-checks", "W3005", "--", str(users_app.template_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_checkov_finds_nothing_in_gpuwarden(users_app: UserApp) -> None:
    if not checkov.EXECUTABLE.exists():
        pytest.skip("checkov is not installed: run `make setup` (make test installs it)")
    proc = checkov.scan([users_app.template_path], output="json")
    assert proc.returncode in (0, 1), proc.stderr
    report = json.loads(proc.stdout)
    ours = users_app.ids("ml-a") | users_app.ids("ml-b")
    assert len(ours) > 100
    failed = [
        (r["check_id"], r["resource"])
        for r in report["results"]["failed_checks"]
        if r["resource"].split(".", 1)[-1] in ours
    ]
    assert failed == []


def test_a_cluster_whose_name_cloudformation_generates_is_refused() -> None:
    stack = Stack(App(), "Unnamed")
    cluster = eks.Cluster(stack, "Training", version=eks.KubernetesVersion.V1_34)
    with pytest.raises(SettingsError, match="explicit cluster_name"):
        Gpuwarden(stack, "Gpuwarden", cluster=cluster)


def test_a_property_gpuwarden_does_not_understand_fails_the_synth_naming_it() -> None:
    with pytest.raises(SettingsError, match="'mode' must be one of act, observe"):
        Gpuwarden(Stack(App(), "Bad"), "Gpuwarden", cluster="ml-a", mode="on")
    with pytest.raises(SettingsError, match="policy's cluster 'ml-z' is not"):
        Gpuwarden(Stack(App(), "Bad"), "Gpuwarden", cluster="ml-a", policy={"cluster": "ml-z"})
