"""`gpuwarden doctor`: one finding per check, on the simulator (KUBECONFIG) and moto (CloudWatch)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from gpuwarden.cli import main
from gpuwarden.services.doctor.doctor import DoctorReport, Finding, Severity
from gpuwarden.terminal import doctor_table as render_table
from sim import KubeSim
from sim import builders as b
from sim.actors.karpenter import karpenter_deployment, karpenter_global_settings, termination_handler
from tests.integration.doctor_cli import POLICY, by_check, doctor, healthy_cluster, put_gpu_metric

CHECKS = [
    "cluster-access",
    "karpenter-interruption-queue",
    "node-termination-handler",
    "nodepool-termination-grace",
    "checkpoint-annotations",
    "checkpoint-gangs",
    "checkpoint-coverage",
    "static-nodepool-gpu-limit",
    "gpu-health",
    "karpenter-expiry",
    "alert-node-labels",
    "eks-auto-mode",
    "karpenter-version",
    "gpu-metrics",
    "policy",
    "behaviours",
]


def test_a_healthy_cluster_has_every_check_ok_and_exits_0(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given a cluster with nothing that fights gpuwarden, and GPU metrics in CloudWatch
    healthy_cluster(sim)
    put_gpu_metric()
    # When the doctor runs (output piped: JSON)
    code, report = doctor(sim, tmp_path)
    # Then every check of the contract is reported once, in order, all ok
    assert [f["check"] for f in report["findings"]] == CHECKS
    assert {f["severity"] for f in report["findings"]} == {"ok"}, report
    assert set(report["findings"][0]) == {"check", "severity", "message", "fix"}
    assert (code, report["errors"], report["warnings"]) == (0, 0, 0)
    # the policy finding tells when each window next opens and closes, in its own zone
    policy = by_check(report)["policy"]["message"]
    assert (
        "business-hours-freeze is open until 2026-11-23T19:00:00+09:00, next opens 2026-11-24T09:00:00+09:00" in policy
    )
    assert "night-cap is open until 2026-11-23T06:00:00+00:00, next opens 2026-11-23T22:00:00+00:00 (UTC)" in policy


def test_doctor_only_reads(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    sim.clear_requests()
    doctor(sim, tmp_path)
    writes = [(r.method, r.path) for r in sim.requests if r.method != "GET"]
    assert writes
    assert {path for _, path in writes} == {"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"}


def test_karpenter_queue_and_termination_handler_are_warnings(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given Karpenter in another namespace with its interruption queue, and NTH beside it
    healthy_cluster(sim)
    sim.delete_direct("Deployment", "karpenter", "kube-system")
    sim.create(karpenter_deployment(queue="ml-prod-interruptions", namespace="karpenter"))
    sim.create(termination_handler("DaemonSet"))
    put_gpu_metric()
    code, report = doctor(sim, tmp_path)
    found = by_check(report)
    queue = found["karpenter-interruption-queue"]
    assert queue["severity"] == "warn"
    assert "karpenter/karpenter" in queue["message"]
    assert "ml-prod-interruptions" in queue["message"]
    assert "INTERRUPTION_QUEUE" in queue["message"]
    assert "do-not-disrupt" in queue["message"]
    assert "interruptionQueue" in queue["fix"]
    assert found["node-termination-handler"]["severity"] == "warn"
    assert "DaemonSet kube-system/aws-node-termination-handler" in found["node-termination-handler"]["message"]
    # with the queue on, opted-in pods without do-not-disrupt are a warning
    assert found["checkpoint-annotations"]["severity"] == "warn"
    assert "ml/train-0-worker" in found["checkpoint-annotations"]["message"]
    assert (code, report["errors"], report["warnings"]) == (0, 0, 3)


@pytest.mark.parametrize("setting", ["flag", "configmap"])
def test_the_queue_is_found_in_every_setting_karpenter_versions_used(
    sim: KubeSim, aws: None, tmp_path: Path, setting: str
) -> None:
    healthy_cluster(sim)
    sim.delete_direct("Deployment", "karpenter", "kube-system")
    if setting == "configmap":
        sim.create(karpenter_deployment(queue=None, version="0.31.4"))
        sim.create(karpenter_global_settings("legacy-queue"))
    else:
        sim.create(karpenter_deployment(queue="flag-queue", setting="flag"))
    _, report = doctor(sim, tmp_path)
    queue = by_check(report)["karpenter-interruption-queue"]
    assert queue["severity"] == "warn"
    assert ("legacy-queue" if setting == "configmap" else "flag-queue") in queue["message"]


def test_short_termination_grace_and_static_pool_caps_are_warnings(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    put_gpu_metric()
    pool = sim.get("NodePool", "gpu-training")
    assert pool is not None
    sim.patch_direct("NodePool", "gpu-training", {"spec": {"template": {"spec": {"terminationGracePeriod": "3m"}}}})
    static = b.nodepool("gpu-static", gpu_limit=None)
    static["spec"]["replicas"] = 2
    static["spec"]["limits"] = {"nodes": "4"}
    sim.create(static)
    policy = POLICY.replace("nodepools: [gpu-training]", "nodepools: [gpu-training, gpu-static]")
    code, report = doctor(sim, tmp_path, policy)
    found = by_check(report)
    grace = found["nodepool-termination-grace"]
    # 3m < 120 s + the longest checkpoint timeout of its pods (120 s)
    assert grace["severity"] == "warn"
    assert "gpu-training (3m < 120 s + 120 s)" in grace["message"]
    static_finding = found["static-nodepool-gpu-limit"]
    assert static_finding["severity"] == "warn"
    assert "window night-cap -> gpu-static" in static_finding["message"]
    assert code == 0


def test_bad_checkpoint_annotations_are_errors_and_exit_1(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    put_gpu_metric()
    node = "ip-10-0-1-23.us-west-2.compute.internal"
    sim.create(b.training_pod("typo-worker", node, checkpoint="signal:SIGFOO"))
    sim.create(b.training_pod("wrong-container-worker", node, checkpoint="annotate", checkpoint_container="main"))
    code, report = doctor(sim, tmp_path)
    finding = by_check(report)["checkpoint-annotations"]
    assert finding["severity"] == "error"
    assert "ml/typo-worker" in finding["message"]
    assert "ml/wrong-container-worker" in finding["message"]
    assert (code, report["errors"]) == (1, 1)


def test_missing_verbs_are_a_cluster_access_error(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    put_gpu_metric()
    sim.authorizer.deny("create", "pods", subresource="eviction")
    sim.authorizer.deny("create", "nodeclaims", group="karpenter.sh")
    code, report = doctor(sim, tmp_path)
    access = by_check(report)["cluster-access"]
    assert access["severity"] == "error"
    assert "create pods/eviction" in access["message"]
    assert "create nodeclaims.karpenter.sh" in access["message"]
    assert code == 1


def test_no_gpu_metrics_is_a_warning(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    put_gpu_metric("another-cluster")
    _, report = doctor(sim, tmp_path)
    assert by_check(report)["gpu-metrics"]["severity"] == "warn"
    assert "ml-prod" in by_check(report)["gpu-metrics"]["message"]


def test_an_unreachable_cluster_and_a_bad_policy_are_findings_not_tracebacks(aws: None, tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "ml-prod", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "ml-prod", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text("cluster: ml-prod\nwindows: [{name: x, schedule: 'not cron', duration: 1h}]\n")
    env = {"KUBECONFIG": str(kubeconfig), "GPUWARDEN_POLICY_FILE": str(policy_file)}
    result = CliRunner().invoke(main, ["doctor", "--json"], env=env)
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert [f["check"] for f in report["findings"]] == CHECKS
    found = by_check(report)
    assert found["cluster-access"]["severity"] == "error"
    assert f"127.0.0.1:{port}" in found["cluster-access"]["message"]
    assert found["policy"]["severity"] == "error"
    assert report["errors"] == 2
    # and no behaviour is listed as on: an invalid policy runs nothing (was: the defaults' list)
    assert found["behaviours"]["message"].startswith("none: the policy does not validate"), found["behaviours"]


def test_a_terminal_gets_a_table_with_the_fixes() -> None:
    report = DoctorReport(
        [
            Finding("cluster-access", Severity.OK, "all 17 verbs gpuwarden uses are allowed"),
            Finding("node-termination-handler", Severity.WARN, "two drainers", "uninstall it"),
        ]
    )
    lines = render_table(report).splitlines()
    assert lines[0].split() == ["CHECK", "SEVERITY", "MESSAGE"]
    assert "WARN" in lines[2]
    assert "fix: uninstall it" in lines[3]
    assert lines[-1] == "0 errors, 1 warning"


def test_a_list_the_identity_may_not_do_is_a_warning_on_the_checks_that_need_it(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    healthy_cluster(sim)
    put_gpu_metric()
    sim.authorizer.deny("list", "deployments", group="apps")
    code, report = doctor(sim, tmp_path)
    found = by_check(report)
    assert found["karpenter-interruption-queue"]["severity"] == "warn"
    assert "Deployments forbidden (403)" in found["karpenter-interruption-queue"]["message"]
    assert found["node-termination-handler"]["severity"] == "warn"
    assert found["cluster-access"]["severity"] == "ok"  # gpuwarden itself never lists Deployments
    assert code == 0


def test_gpu_nodes_expiring_within_seven_days_are_named_with_their_plan(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    # Given a healthy cluster whose GPU node's NodeClaim expires soon, and another GPU node 29 days away
    healthy_cluster(sim)
    put_gpu_metric()
    near = sim.create(b.gpu_node("ip-10-0-3-3.us-west-2.compute.internal", "i-0333333333333333a"))
    near_claim = b.nodeclaim_for(near)
    near_claim["spec"]["expireAfter"] = "1h"
    sim.create(near_claim)
    far = sim.create(b.gpu_node("ip-10-0-4-4.us-west-2.compute.internal", "i-0444444444444444a"))
    far_claim = b.nodeclaim_for(far)
    far_claim["spec"]["expireAfter"] = "696h"
    sim.create(far_claim)
    # When the doctor runs
    _, report = doctor(sim, tmp_path)
    # Then the soon-expiring node is named with the drain gpuwarden plans for it; the other is not
    found = by_check(report)["karpenter-expiry"]
    assert found["severity"] == "warn", found
    assert found["message"].startswith("1 GPU node expires within 7 days: ip-10-0-3-3.us-west-2.compute.internal")
    assert "before Karpenter expires the node at" in found["message"]
    assert "ip-10-0-4-4" not in found["message"]
    assert "expireAfter" in found["fix"]


def test_karpenter_running_outside_the_cluster_is_said_not_denied(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # Given no Karpenter Deployment (the real plane runs Karpenter as a process) and a NodePool
    sim.create(b.nodepool("gpu-training"))
    _, report = doctor(sim, tmp_path)
    assert by_check(report)["karpenter-interruption-queue"]["message"].startswith("no Karpenter found")
    # When Karpenter's NodePool controller has written the pool's Ready condition
    ready = {"type": "Ready", "status": "True", "reason": "Ready", "lastTransitionTime": "2026-11-23T00:00:00Z"}
    sim.patch_direct("NodePool", "gpu-training", {"status": {"conditions": [ready]}})
    _, report = doctor(sim, tmp_path)
    # Then doctor says what it found, and that the queue cannot be read from here
    found = by_check(report)["karpenter-interruption-queue"]
    assert found["severity"] == "warn"
    assert found["message"].startswith("Karpenter runs (NodePool gpu-training carries the Ready condition"), found
