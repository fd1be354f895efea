"""The right cluster or none (docs/cli.md#the-right-cluster): the kubeconfig's cluster is the policy's,
or exit 2 naming both before anything is read; `~/.kube/config` read as kubectl reads it when
KUBECONFIG is unset. The console script in its own process; the simulator; moto's EKS in server mode."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from sim import KubeSim
from sim.builders import gpu_node, nodepool
from tests.integration.cli_subprocess import GPUWARDEN, invoke_env, moto_endpoint

# the fixtures: a real-time simulator with acking workloads, a moto server
__all__ = ["moto_endpoint"]

NODE = "ip-10-0-1-23.us-west-2.compute.internal"


@pytest.fixture
def sim() -> Iterator[KubeSim]:
    with KubeSim(clock_speed=1.0) as running:
        running.create(nodepool("gpu-training"))
        running.create(gpu_node(NODE, "i-0abc1234def567890", nodepool="gpu-training"))
        running.clear_requests()
        yield running


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GPUWARDEN), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def with_policy(env: dict[str, str], tmp_path: Path, cluster: str) -> dict[str, str]:
    policy = tmp_path / f"{cluster}.yaml"
    policy.write_text(f"cluster: {cluster}\n")
    return {k: v for k, v in env.items() if k != "GPUWARDEN_CLUSTER"} | {"GPUWARDEN_POLICY_FILE": str(policy)}


@pytest.mark.parametrize(
    "argv",
    [
        ("runbook", "drain", "--node", NODE),
        ("release", "--all"),
        ("scan",),
        ("doctor",),
    ],
)
def test_a_policy_for_another_cluster_is_exit_2_naming_both_before_any_read(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path, argv: tuple[str, ...]
) -> None:
    # Given a kubeconfig whose context is cluster ml-prod and a policy for ml-staging
    env = with_policy(invoke_env(sim, moto_endpoint), tmp_path, "ml-staging")
    # When a command runs
    done = run(env, *argv)
    # Then it is refused, naming both, and the cluster was not asked anything (was: it ran)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "'ml-prod'" in done.stderr
    assert "'ml-staging'" in done.stderr
    assert sim.requests == []


def test_the_same_cluster_runs(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    env = with_policy(invoke_env(sim, moto_endpoint), tmp_path, "ml-prod")
    done = run(env, "runbook", "plan", "--node", NODE)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["node"] == NODE


def test_without_kubeconfig_home_kube_config_is_read_as_kubectl_reads_it(
    sim: KubeSim, moto_endpoint: str, tmp_path: Path
) -> None:
    # Given KUBECONFIG unset and the simulator's kubeconfig at ~/.kube/config
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text(sim.kubeconfig_path.read_text())
    env = {k: v for k, v in invoke_env(sim, moto_endpoint).items() if k != "KUBECONFIG"} | {"HOME": str(tmp_path)}
    # When the on-call engineer asks for a plan
    done = run(env, "runbook", "plan", "--node", NODE)
    # Then the cluster of ~/.kube/config answered (was: EKS was asked for cluster ml-prod)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["node"] == NODE
    assert sim.requests


def _eks_kubeconfig(path: Path, server: str) -> None:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "arn:aws:eks:us-west-2:123456789012:cluster/x", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "eks", "context": {"cluster": "arn:aws:eks:us-west-2:123456789012:cluster/x"}}],
                "current-context": "eks",
            }
        )
    )


def test_on_eks_the_endpoint_describe_cluster_returns_decides(sim: KubeSim, moto_endpoint: str, tmp_path: Path) -> None:
    # Given moto's EKS with cluster ml-prod, and kubeconfigs for its endpoint and for another cluster's
    eks = boto3.client(
        "eks",
        region_name="us-west-2",
        endpoint_url=moto_endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    if "ml-prod" not in eks.list_clusters()["clusters"]:
        role, vpc = "arn:aws:iam::123456789012:role/eks", {"subnetIds": ["subnet-1"]}
        eks.create_cluster(name="ml-prod", roleArn=role, resourcesVpcConfig=vpc)
    prod = eks.describe_cluster(name="ml-prod")["cluster"]["endpoint"]
    assert ".us-west-2.eks.amazonaws.com" in prod
    staging = "https://0123456789ABCDEF0123456789ABCDEF.gr7.us-west-2.eks.amazonaws.com"  # another cluster's
    env = with_policy(invoke_env(sim, moto_endpoint), tmp_path, "ml-prod")
    # When the kubeconfig is ml-staging's endpoint: exit 2, naming both endpoints
    _eks_kubeconfig(tmp_path / "staging", staging)
    wrong = run(env | {"KUBECONFIG": str(tmp_path / "staging")}, "runbook", "plan", "--node", NODE)
    assert wrong.returncode == 2, wrong.stderr
    assert staging in wrong.stderr
    assert prod in wrong.stderr
    # When it is ml-prod's: the check passes (the endpoint itself is not reachable here: exit 1,
    # a failure to reach it, not a refusal)
    _eks_kubeconfig(tmp_path / "prod", prod)
    right = run(env | {"KUBECONFIG": str(tmp_path / "prod")}, "runbook", "plan", "--node", NODE)
    assert right.returncode == 1, right.stderr
    assert "no cluster reachable" in json.loads(right.stdout)["reason"]
