"""A deleted pod ends as a kubelet ends it (realplane/plane/stages/kubelet-delete.yaml): the docs'
own four-rank Indexed Job (docs/training-jobs.md, "An Indexed Job, opted in") on a plane whose KWOK
stops an evicted rank at the end of its grace with phase Failed, so the Job controller's
job-tracking finalizer, `podFailurePolicy` and `podReplacementPolicy` do what they do on a node.

Its own plane, without Karpenter: four KWOK nodes made by hand (the kubelet stand-in is KWOK; the
nodes are named as such), one rank each."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
import yaml
from kubernetes import client

from realplane.plane.harness import Plane
from tests.docs_manifests import docs_indexed_job
from tests.e2e.world import ARTIFACTS, kwok_node

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")]

TRACKING = "batch.kubernetes.io/job-tracking"
INDEX = "batch.kubernetes.io/job-completion-index"


@pytest.fixture(scope="module")
def kubelet_plane() -> Iterator[Plane]:
    with Plane(artifacts=ARTIFACTS / "kubelet-deletes", karpenter=False, kubelet_deletes=True) as plane:
        yield plane


def wait(what: str, check: Callable[[], Any], timeout: float = 120.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"not reached in {timeout:.0f} s: {what}")


def test_an_evicted_rank_of_the_docs_indexed_job_stops_after_its_grace_and_is_replaced(kubelet_plane: Plane) -> None:
    api = kubelet_plane.api_client()
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    # Given the docs' Indexed Job, its namespace and service account, one KWOK node per rank
    job = docs_indexed_job()
    ns = job["metadata"]["namespace"]
    core.create_namespace({"metadata": {"name": ns}})
    core.create_namespaced_service_account(
        ns, {"metadata": {"name": job["spec"]["template"]["spec"]["serviceAccountName"]}}
    )
    for i in range(4):
        core.create_node(kwok_node(f"kwok-kubelet-stand-in-{i}"))
    kubectl = [shutil.which("kubectl") or "kubectl", f"--kubeconfig={kubelet_plane.kubeconfig}"]
    subprocess.run([*kubectl, "apply", "-f", "-"], input=yaml.safe_dump(job), text=True, check=True)  # as a user does
    selector = f"batch.kubernetes.io/job-name={job['metadata']['name']}"

    def running() -> list[Any]:
        pods = core.list_namespaced_pod(ns, label_selector=selector).items
        return [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]

    ranks = wait("4 ranks Running", lambda: (r := running()) and len(r) == 4 and r)
    rank0 = next(p for p in ranks if p.metadata.labels[INDEX] == "0")
    assert TRACKING in (rank0.metadata.finalizers or [])
    grace = rank0.spec.termination_grace_period_seconds
    assert grace == 30  # the docs' terminationGracePeriodSeconds

    # When rank 0 is evicted (what gpuwarden's and Karpenter's drains send)
    evicted_at = time.monotonic()
    core.create_namespaced_pod_eviction(
        rank0.metadata.name, ns, {"metadata": {"name": rank0.metadata.name, "namespace": ns}}
    )

    # Then it is still there, terminating and Running, with the Eviction API's DisruptionTarget condition
    pod = core.read_namespaced_pod(rank0.metadata.name, ns)
    assert pod.metadata.deletion_timestamp is not None
    assert pod.status.phase == "Running"
    assert any(c.type == "DisruptionTarget" and c.status == "True" for c in pod.status.conditions or [])

    def old_rank() -> Any:
        return next((p for p in core.list_namespaced_pod(ns).items if p.metadata.uid == rank0.metadata.uid), None)

    def replacement() -> Any:
        pods = core.list_namespaced_pod(ns, label_selector=f"{selector},{INDEX}=0").items
        return next((p for p in pods if p.metadata.uid != rank0.metadata.uid), None)

    # and at the end of its grace it stops (Failed), and no new rank 0 is made before that
    # (podReplacementPolicy: Failed)
    failed = wait(
        "the evicted rank Failed", lambda: (p := old_rank()) is None or p.status.phase == "Failed", grace + 60
    )
    stopped_after = time.monotonic() - evicted_at
    assert stopped_after >= grace - 2, f"stopped {stopped_after:.1f} s after the eviction, before its {grace} s grace"
    if failed is not True:
        assert replacement() is None or failed.status.phase == "Failed"
    # then its job-tracking finalizer is removed by the Job controller and the pod leaves; a new rank 0 runs
    wait("the evicted rank gone", lambda: old_rank() is None)
    new = wait("a new rank 0", replacement)
    assert new.metadata.creation_timestamp >= pod.metadata.deletion_timestamp - timedelta(seconds=1)
    # and the Job counts no failure: podFailurePolicy ignores a DisruptionTarget
    status = batch.read_namespaced_job_status(job["metadata"]["name"], ns).status
    assert not status.failed, status
