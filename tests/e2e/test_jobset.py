"""The docs' JobSet (docs/training-jobs.md, "A JobSet, opted in") on a plane that runs JobSet's own
controller and webhooks (`Plane(jobset=True)`, realplane/plane/jobset.py) and ends a deleted pod as
a kubelet does (`kubelet_deletes=True`): one rank evicted, the child Job fails by its
`podFailurePolicy` (FailJob on DisruptionTarget), and the JobSet restarts by its failure policy's
`RestartJobSetAndIgnoreMaxRestarts`, counting nothing toward `maxRestarts`.

Its own plane, without Karpenter: sixteen KWOK nodes made by hand, one rank each. The manifest is
applied exactly as the page shows it: its image is never pulled (KWOK runs no container) and its
ServiceAccount `trainer` is made first (the page's RBAC section makes it). The nodes carry no GPU
taint, since the manifest tolerates none."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client

from realplane.plane.harness import Plane
from tests.docs_manifests import docs_manifest
from tests.e2e.world import ARTIFACTS, kwok_node

pytestmark = [pytest.mark.timeout(360), pytest.mark.skipif(shutil.which("kubectl") is None, reason="needs kubectl")]

JOBSET = ("jobset.x-k8s.io", "v1alpha2")
NAME = "jobset.sigs.k8s.io/jobset-name"
ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"
INDEX = "batch.kubernetes.io/job-completion-index"
#: pkg/constants/constants.go: the event the JobSet controller records for the rule's action.
RESTART_EVENT = "RestartJobSetAndIgnoreMaxRestartsFailurePolicyAction"


@pytest.fixture(scope="module")
def jobset_plane() -> Iterator[Plane]:
    with Plane(artifacts=ARTIFACTS / "jobset", karpenter=False, kubelet_deletes=True, jobset=True) as plane:
        yield plane


def test_an_evicted_rank_of_the_docs_jobset_restarts_the_set_without_counting_a_restart(jobset_plane: Plane) -> None:
    plane = jobset_plane
    api = plane.api_client()
    core: Any = client.CoreV1Api(api)
    batch: Any = client.BatchV1Api(api)
    custom: Any = client.CustomObjectsApi(api)
    # Given the docs' JobSet, its namespace and service account, one KWOK node per rank
    js = docs_manifest("training-jobs.md", "A JobSet, opted in")
    ns, name = js["metadata"]["namespace"], js["metadata"]["name"]
    workers = js["spec"]["replicatedJobs"][0]
    ranks = workers["template"]["spec"]["completions"]
    assert (workers["replicas"], ranks) == (1, 16)
    core.create_namespace({"metadata": {"name": ns}})
    account = workers["template"]["spec"]["template"]["spec"]["serviceAccountName"]
    core.create_namespaced_service_account(ns, {"metadata": {"name": account}})
    for i in range(ranks):
        core.create_node(kwok_node(f"kwok-kubelet-stand-in-{i}", gpu_taint=False))
    kubectl = [shutil.which("kubectl") or "kubectl", f"--kubeconfig={plane.kubeconfig}"]
    subprocess.run([*kubectl, "apply", "-f", "-"], input=yaml.safe_dump(js), text=True, check=True)  # as a user does

    # Then JobSet's defaulting webhook has run (startupPolicy is set by it alone), its rule keeps its name
    stored = custom.get_namespaced_custom_object(*JOBSET, ns, "jobsets", name)
    assert stored["spec"]["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}, stored["spec"]
    assert [r["name"] for r in stored["spec"]["failurePolicy"]["rules"]] == ["evictedRank"]

    def running(attempt: str) -> list[Any] | None:
        pods = core.list_namespaced_pod(ns, label_selector=f"{NAME}={name},{ATTEMPT}={attempt}").items
        up = [p for p in pods if p.status.phase == "Running" and p.metadata.deletion_timestamp is None]
        return up if len(up) == ranks else None

    # and the controller made its child Job and all 16 ranks run, one per node
    first = plane.wait_for("16 ranks of attempt 0 Running", lambda: running("0"), timeout=120)
    assert len({p.spec.node_name for p in first}) == ranks
    jobs = batch.list_namespaced_job(ns, label_selector=f"{NAME}={name}").items
    assert [j.metadata.name for j in jobs] == [f"{name}-workers-0"]
    child = jobs[0].metadata.name

    # When one rank is evicted (what gpuwarden's and Karpenter's drains send)
    rank = next(p for p in first if p.metadata.annotations[INDEX] == "3")
    core.create_namespaced_pod_eviction(
        rank.metadata.name, ns, {"metadata": {"name": rank.metadata.name, "namespace": ns}}
    )

    # Then, once it has stopped (Failed at the end of its grace), the child Job fails by its
    # podFailurePolicy (FailJob on the Eviction API's DisruptionTarget)
    def failed_by_policy() -> bool:
        try:
            job = batch.read_namespaced_job_status(child, ns)
        except client.ApiException as err:
            if err.status == 404:  # already deleted by the JobSet's restart: asked of the JobSet below
                return True
            raise
        return any(
            c.type in ("FailureTarget", "Failed") and c.status == "True" and c.reason == "PodFailurePolicy"
            for c in job.status.conditions or []
        )

    plane.wait_for("the child Job failed by its podFailurePolicy", failed_by_policy, timeout=150)

    # and the JobSet restarts by its rule: one restart, none counted toward maxRestarts, not failed
    def restarted() -> dict[str, Any] | None:
        got: dict[str, Any] = custom.get_namespaced_custom_object_status(*JOBSET, ns, "jobsets", name)
        return got if got.get("status", {}).get("restarts") == 1 else None

    # (the Job is Failed once its other ranks, deleted by the Job controller, have ended their grace)
    status = plane.wait_for("the JobSet restarted once", restarted, timeout=120)["status"]
    assert status.get("restartsCountTowardsMax", 0) == 0, status
    assert not status.get("terminalState"), status
    assert not any(c["type"] in ("Failed", "Completed") and c["status"] == "True" for c in status.get("conditions", []))

    def restart_event() -> bool:  # the controller's event recorder writes it after the status, on its own
        events = core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        return any(e.reason == RESTART_EVENT for e in events)

    plane.wait_for(f"the JobSet's {RESTART_EVENT} event", restart_event, timeout=30)
    # and its child Job is made again, attempt 1, with all 16 ranks Running
    second = plane.wait_for("16 ranks of attempt 1 Running", lambda: running("1"), timeout=150)
    assert not {p.metadata.uid for p in second} & {p.metadata.uid for p in first}
    assert [j.metadata.labels[ATTEMPT] for j in batch.list_namespaced_job(ns).items] == ["1"]
