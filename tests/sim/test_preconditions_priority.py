"""The simulator as a real API server on DeleteOptions preconditions and pod priority admission.

Messages as kube-apiserver writes them: `rest.BeforeDelete` (DELETE, and the eviction's delete)
answers a UID mismatch with 409 Conflict naming the resource by its Kind; the Priority admission
plugin resolves `priorityClassName` into `spec.priority` and refuses what it cannot resolve.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim import KubeSim
from sim import builders as b

WRONG_UID = "00000000-0000-0000-0000-000000000000"


def _pod(sim: KubeSim, node: dict[str, Any], name: str = "trainer-0") -> dict[str, Any]:
    return sim.create(b.training_pod(name, node, checkpoint=None))


def test_delete_with_another_pods_uid_is_a_conflict_and_the_pod_stays(
    sim: KubeSim, core: Any, node: dict[str, Any]
) -> None:
    # Given a running pod
    pod = _pod(sim, node)
    uid = pod["metadata"]["uid"]
    # When it is deleted with a UID precondition naming another pod
    body = client.V1DeleteOptions(grace_period_seconds=5, preconditions=client.V1Preconditions(uid=WRONG_UID))
    with pytest.raises(ApiException) as err:
        core.delete_namespaced_pod("trainer-0", "ml", body=body)
    # Then 409 Conflict with the API server's own words, and the pod is untouched
    status = json.loads(err.value.body or "{}")
    assert err.value.status == 409
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        f'Operation cannot be fulfilled on Pod "trainer-0": the UID in the precondition ({WRONG_UID}) does not '
        f"match the UID in record ({uid}). The object might have been deleted and then recreated"
    )
    assert status["details"] == {"name": "trainer-0", "kind": "Pod"}
    assert "deletionTimestamp" not in (sim.get("Pod", "trainer-0", "ml") or {})["metadata"]
    # and with its own UID the delete goes through
    body = client.V1DeleteOptions(grace_period_seconds=5, preconditions=client.V1Preconditions(uid=uid))
    core.delete_namespaced_pod("trainer-0", "ml", body=body)
    assert (sim.get("Pod", "trainer-0", "ml") or {})["metadata"]["deletionGracePeriodSeconds"] == 5


def test_eviction_with_another_pods_uid_is_a_conflict(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    _pod(sim, node)
    eviction = client.V1Eviction(
        metadata=client.V1ObjectMeta(name="trainer-0", namespace="ml"),
        delete_options=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=WRONG_UID)),
    )
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod_eviction("trainer-0", "ml", eviction)
    assert err.value.status == 409
    assert json.loads(err.value.body or "{}")["message"].startswith(
        'Operation cannot be fulfilled on Pod "trainer-0": the UID in the precondition'
    )
    assert sim.get("Pod", "trainer-0", "ml") is not None


def test_negative_grace_is_treated_as_one_second(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    _pod(sim, node)
    core.delete_namespaced_pod("trainer-0", "ml", grace_period_seconds=-3)
    assert (sim.get("Pod", "trainer-0", "ml") or {})["metadata"]["deletionGracePeriodSeconds"] == 1


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not on PATH")
def test_kubectl_reads_the_eviction_conflict_as_a_real_servers(
    sim: KubeSim, node: dict[str, Any], tmp_path: Path
) -> None:
    # Given a pod and an eviction naming another UID, sent by kubectl
    _pod(sim, node)
    body = tmp_path / "eviction.json"
    body.write_text(
        json.dumps(
            {
                "apiVersion": "policy/v1",
                "kind": "Eviction",
                "metadata": {"name": "trainer-0", "namespace": "ml"},
                "deleteOptions": {"preconditions": {"uid": WRONG_UID}},
            }
        )
    )
    result = subprocess.run(
        [
            "kubectl",
            "--kubeconfig",
            str(sim.kubeconfig_path),
            "create",
            "--raw",
            "/api/v1/namespaces/ml/pods/trainer-0/eviction",
            "-f",
            str(body),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then kubectl reports the server's Conflict, and the pod stays
    assert result.returncode != 0
    assert "Error from server (Conflict)" in result.stderr, result.stderr
    assert "The object might have been deleted and then recreated" in result.stderr
    assert sim.get("Pod", "trainer-0", "ml") is not None


def _namespace(sim: KubeSim, name: str = "ml") -> None:
    sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def _class(name: str, value: int, default: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        "globalDefault": default,
    }


def test_priority_admission_resolves_the_class_into_spec_priority(
    sim: KubeSim, core: Any, node: dict[str, Any]
) -> None:
    _namespace(sim)
    sim.create(_class("batch-low", -100))
    manifest = b.training_pod("low", node, checkpoint=None)
    manifest["spec"]["priorityClassName"] = "batch-low"
    created = core.create_namespaced_pod("ml", manifest)
    assert created.spec.priority == -100
    assert created.spec.preemption_policy == "PreemptLowerPriority"
    # no class: 0, or the cluster's global default once there is one
    assert core.create_namespaced_pod("ml", b.training_pod("plain", node, checkpoint=None)).spec.priority == 0
    sim.create(_class("default", 7, default=True))
    assert core.create_namespaced_pod("ml", b.training_pod("dflt", node, checkpoint=None)).spec.priority == 7
    # the system classes exist in every cluster
    critical = b.training_pod("crit", node, checkpoint=None)
    critical["spec"]["priorityClassName"] = "system-cluster-critical"
    assert core.create_namespaced_pod("ml", critical).spec.priority == 2000000000


def test_priority_admission_refuses_an_unknown_class_and_a_hand_written_priority(
    sim: KubeSim, core: Any, node: dict[str, Any]
) -> None:
    _namespace(sim)
    unknown = b.training_pod("x", node, checkpoint=None)
    unknown["spec"]["priorityClassName"] = "nope"
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("ml", unknown)
    assert err.value.status == 403
    assert (
        json.loads(err.value.body or "{}")["message"]
        == 'pods "x" is forbidden: no PriorityClass with name nope was found'
    )
    forged = b.training_pod("y", node, checkpoint=None)
    forged["spec"]["priority"] = 1000
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("ml", forged)
    assert err.value.status == 403
    assert "the integer value of priority (1000) must not be provided in pod spec" in str(err.value.body)
