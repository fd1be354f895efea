"""The official Python client against the simulator."""

from __future__ import annotations

import time
from typing import Any

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from sim import KubeSim
from sim import builders as b


def _status(exc: ApiException) -> dict[str, Any]:
    import json

    return json.loads(exc.body or "{}")  # type: ignore[no-any-return]


def test_list_nodes_and_pods_with_field_and_label_selectors(sim: KubeSim, core: Any) -> None:
    # Given two nodes with pods
    n1 = sim.create(b.gpu_node("gpu-a", "i-0aaa", capacity_type="spot"))
    n2 = sim.create(b.gpu_node("gpu-b", "i-0bbb", capacity_type="on-demand"))
    sim.create(b.training_pod("train-0-w", n1))
    sim.create(b.inference_pod("inf-1", n1))
    sim.create(b.inference_pod("inf-2", n2, labels={"app": "inference", "tier": "canary"}))

    # When / Then: field selectors
    on_a = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-a").items
    assert sorted(p.metadata.name for p in on_a) == ["inf-1", "train-0-w"]
    named = core.list_node(field_selector="metadata.name=gpu-b").items
    assert [n.metadata.name for n in named] == ["gpu-b"]
    # label selectors: =, !=, in, notin, exists, !exists
    assert [n.metadata.name for n in core.list_node(label_selector="karpenter.sh/capacity-type=spot").items] == [
        "gpu-a"
    ]
    assert [n.metadata.name for n in core.list_node(label_selector="karpenter.sh/capacity-type!=spot").items] == [
        "gpu-b"
    ]
    in_sel = "karpenter.sh/capacity-type in (spot,on-demand)"
    assert len(core.list_node(label_selector=in_sel).items) == 2
    assert len(core.list_node(label_selector="karpenter.sh/capacity-type notin (spot)").items) == 1
    canary = core.list_namespaced_pod("serving", label_selector="app=inference,tier").items
    assert [p.metadata.name for p in canary] == ["inf-2"]
    not_canary = core.list_namespaced_pod("serving", label_selector="app=inference,!tier").items
    assert [p.metadata.name for p in not_canary] == ["inf-1"]
    # limit pages the list as kube-apiserver does: one item, and a continue token for the rest
    first = core.list_node(limit=1)
    assert len(first.items) == 1
    assert first.metadata._continue
    rest = core.list_node(limit=1, _continue=first.metadata._continue)
    assert {n.metadata.name for n in first.items + rest.items} == {n.metadata.name for n in core.list_node().items}


def test_pods_by_node_follow_every_write(sim: KubeSim, core: Any) -> None:
    """The store keeps pods indexed by spec.nodeName (as kube-apiserver's watch cache does); a
    list by node answers what a scan of every pod would, through creates, binds and deletes."""
    # Given pods on two nodes and one pending
    n1 = sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    n2 = sim.create(b.gpu_node("gpu-b", "i-0bbb"))
    for i in range(3):
        sim.create(b.pod(f"a-{i}", n1, namespace="ml", grace=0))
        sim.create(b.pod(f"b-{i}", n2, namespace="ml"))
    sim.create(b.pod("pending", None, namespace="ml"))

    def on(node: str) -> list[str]:
        return sorted(
            p.metadata.name for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        )

    def scanned(node: str) -> list[str]:
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces().items if p.spec.node_name == node)

    assert on("gpu-a") == scanned("gpu-a") == ["a-0", "a-1", "a-2"]
    assert on("") == ["pending"]

    # When the pending pod is bound, one is deleted at once and one gracefully (still listed, terminating)
    sim.patch_direct("Pod", "pending", {"spec": {"nodeName": "gpu-a"}}, namespace="ml")
    core.delete_namespaced_pod("a-0", "ml", grace_period_seconds=0)
    core.delete_namespaced_pod("b-0", "ml")

    # Then the lists by node say what a scan says
    assert on("gpu-a") == scanned("gpu-a") == ["a-1", "a-2", "pending"]
    assert on("gpu-b") == scanned("gpu-b") == ["b-0", "b-1", "b-2"]
    assert on("") == []
    # combined with a namespace, a label selector and a negation
    assert [
        p.metadata.name
        for p in core.list_namespaced_pod("ml", field_selector="spec.nodeName=gpu-b,metadata.name!=b-1").items
    ] == ["b-0", "b-2"]
    assert core.list_namespaced_pod("default", field_selector="spec.nodeName=gpu-b").items == []
    not_a = core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=gpu-a").items
    assert sorted(p.metadata.name for p in not_a) == ["b-0", "b-1", "b-2"]

    # When b-0's grace runs out, it is gone from its node's list too
    sim.clock.advance(31)
    sim.store.reap()
    assert on("gpu-b") == scanned("gpu-b") == ["b-1", "b-2"]


def test_unsupported_field_selector_is_400(core: Any) -> None:
    with pytest.raises(ApiException) as err:
        core.list_node(field_selector="spec.nodeName=x")
    assert err.value.status == 400
    assert "field label not supported" in _status(err.value)["message"]


def test_three_patch_types(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    # strategic merge (the client's default for a dict body): conditions merge by type
    core.patch_node_status(
        "gpu-a", {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Test"}]}}
    )
    conds = {c.type: c.status for c in core.read_node("gpu-a").status.conditions}
    assert conds["Ready"] == "False"
    assert conds["MemoryPressure"] == "False"  # kept: merged by key, not replaced
    # merge patch with a null delete
    core.patch_node(
        "gpu-a",
        {"metadata": {"labels": {"nvidia.com/gpu.present": None, "x": "y"}}},
        _content_type="application/merge-patch+json",
    )
    labels = core.read_node("gpu-a").metadata.labels
    assert "nvidia.com/gpu.present" not in labels
    assert labels["x"] == "y"
    # JSON patch with a passing and a failing test op
    rv = core.read_node("gpu-a").metadata.resource_version
    core.patch_node(
        "gpu-a",
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/spec/unschedulable", "value": True},
        ],
    )
    assert core.read_node("gpu-a").spec.unschedulable is True
    with pytest.raises(ApiException) as err:
        core.patch_node("gpu-a", [{"op": "test", "path": "/spec/unschedulable", "value": False}])
    assert err.value.status == 422


def test_every_write_bumps_the_global_resource_version(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    before = int(core.read_node("gpu-a").metadata.resource_version)
    sim.create(b.gpu_node("gpu-b", "i-0bbb"))
    core.patch_node("gpu-a", {"metadata": {"annotations": {"a": "1"}}})
    after = int(core.read_node("gpu-a").metadata.resource_version)
    assert after == before + 2


def test_stale_resource_version_is_409_conflict(core: Any, node: dict[str, Any]) -> None:
    current = core.read_node("gpu-a")
    core.patch_node("gpu-a", {"metadata": {"annotations": {"first": "1"}}})
    # patch carrying the old resourceVersion
    stale = {"metadata": {"resourceVersion": current.metadata.resource_version, "annotations": {"x": "1"}}}
    with pytest.raises(ApiException) as err:
        core.patch_node("gpu-a", stale)
    body = _status(err.value)
    assert err.value.status == 409
    assert body["kind"] == "Status"
    assert body["reason"] == "Conflict"
    assert body["details"] == {"name": "gpu-a", "kind": "nodes"}
    # PUT of the stale object
    current.metadata.labels["y"] = "2"
    with pytest.raises(ApiException) as err:
        core.replace_node("gpu-a", current)
    assert err.value.status == 409
    # PUT of a fresh object succeeds
    fresh = core.read_node("gpu-a")
    fresh.metadata.labels["y"] = "2"
    assert core.replace_node("gpu-a", fresh).metadata.labels["y"] == "2"


def test_not_found_already_exists_and_invalid_are_status_objects(core: Any, node: dict[str, Any]) -> None:
    with pytest.raises(ApiException) as err:
        core.read_namespaced_pod("nope", "default")
    body = _status(err.value)
    assert (err.value.status, body["reason"], body["message"]) == (404, "NotFound", 'pods "nope" not found')
    with pytest.raises(ApiException) as err:
        core.create_node({"metadata": {"name": "gpu-a"}})
    assert (err.value.status, _status(err.value)["reason"]) == (409, "AlreadyExists")
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", {"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert (err.value.status, _status(err.value)["reason"]) == (422, "Invalid")


def test_create_in_missing_namespace_is_404(core: Any) -> None:
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("nowhere", pod)
    assert err.value.status == 404
    assert _status(err.value)["message"] == 'namespaces "nowhere" not found'


def test_delete_with_grace_period_then_gone_after_clock_advance(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    sim.create(b.training_pod("train-0-w", node, grace=45))
    sim.create(b.training_pod("train-1-w", node, grace=45))
    # When: delete honouring the pod's own grace, and one with an explicit shorter grace
    deleted = core.delete_namespaced_pod("train-0-w", "ml")
    assert deleted.metadata.deletion_grace_period_seconds == 45
    assert deleted.metadata.deletion_timestamp is not None
    core.delete_namespaced_pod("train-1-w", "ml", grace_period_seconds=5)
    # Then: both still there, terminating
    assert core.read_namespaced_pod("train-0-w", "ml").metadata.deletion_timestamp is not None
    sim.clock.advance(6)
    assert sim.wait_until(lambda: sim.get("Pod", "train-1-w", "ml") is None, timeout=2)
    assert sim.get("Pod", "train-0-w", "ml") is not None
    # a second delete with a shorter grace shortens the deadline
    core.delete_namespaced_pod("train-0-w", "ml", body=client.V1DeleteOptions(grace_period_seconds=1))
    sim.clock.advance(1)
    assert sim.wait_until(lambda: sim.get("Pod", "train-0-w", "ml") is None, timeout=2)


def test_grace_zero_and_unscheduled_pods_go_at_once(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    sim.create(b.training_pod("train-0-w", node))
    sim.create(b.pod("pending", None, "default"))
    core.delete_namespaced_pod("train-0-w", "ml", grace_period_seconds=0)
    core.delete_namespaced_pod("pending", "default")
    assert sim.get("Pod", "train-0-w", "ml") is None
    assert sim.get("Pod", "pending") is None
    status = core.delete_node("gpu-a")  # a Status (this client version returns it as a dict)
    assert (status["status"] if isinstance(status, dict) else status.status) == "Success"
    assert sim.get("Node", "gpu-a") is None


def _guarded(sim: KubeSim, replicas: int, **budget: Any) -> list[str]:
    node = sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    labels = {"app": "inference"}
    dep = sim.create(b.deployment("inference", "serving", labels, replicas))
    rs = sim.create(b.replicaset("inference-abc", "serving", labels, replicas, dep))
    names = [f"inference-abc-{i}" for i in range(replicas)]
    for name in names:
        sim.create(b.inference_pod(name, node, owner=rs))
    sim.create(b.pdb("inference", "serving", labels, **budget))
    return names


def _evict(core: Any, name: str, namespace: str = "serving") -> Any:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
    return core.create_namespaced_pod_eviction(name, namespace, body)


@pytest.mark.parametrize(
    ("budget", "replicas", "allowed"),
    [
        ({"min_available": 2}, 3, 1),
        ({"min_available": "50%"}, 4, 2),
        ({"min_available": "60%"}, 4, 1),  # ceil(2.4) = 3 desired
        ({"max_unavailable": 1}, 3, 1),
        ({"max_unavailable": "30%"}, 4, 2),  # ceil(1.2) = 2 unavailable allowed
    ],
)
def test_eviction_respects_pdb_arithmetic(
    sim: KubeSim, core: Any, budget: dict[str, Any], replicas: int, allowed: int
) -> None:
    names = _guarded(sim, replicas, **budget)
    policy: Any = client.PolicyV1Api(sim.api_client())
    assert policy.read_namespaced_pod_disruption_budget("inference", "serving").status.disruptions_allowed == allowed
    for name in names[:allowed]:
        _evict(core, name)  # 201
    with pytest.raises(ApiException) as err:
        _evict(core, names[allowed])
    body = _status(err.value)
    assert err.value.status == 429
    assert body["message"] == "Cannot evict pod as it would violate the pod's disruption budget."
    assert body["details"]["causes"][0]["reason"] == "DisruptionBudget"
    status = policy.read_namespaced_pod_disruption_budget("inference", "serving").status
    assert (status.disruptions_allowed, status.current_healthy) == (0, replicas - allowed)
    assert status.expected_pods == replicas


def test_eviction_of_terminating_pod_succeeds_and_missing_pod_is_404(sim: KubeSim, core: Any) -> None:
    names = _guarded(sim, 2, min_available=1)
    _evict(core, names[0])
    _evict(core, names[0])  # already terminating: allowed again
    with pytest.raises(ApiException) as err:
        _evict(core, "ghost")
    assert err.value.status == 404


def test_eviction_with_two_pdbs_is_500(sim: KubeSim, core: Any) -> None:
    names = _guarded(sim, 2, min_available=1)
    sim.create(b.pdb("second", "serving", {"app": "inference"}, max_unavailable=1))
    with pytest.raises(ApiException) as err:
        _evict(core, names[0])
    assert err.value.status == 500


def test_evicted_pod_terminates_with_its_grace(sim: KubeSim, core: Any) -> None:
    names = _guarded(sim, 3, min_available=1)
    _evict(core, names[0])
    pod = core.read_namespaced_pod(names[0], "serving")
    assert pod.metadata.deletion_grace_period_seconds == 30
    sim.clock.advance(30)
    assert sim.wait_until(lambda: sim.get("Pod", names[0], "serving") is None, timeout=2)


def test_fault_503_for_two_requests_then_success(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    fault = sim.faults.inject(status=503, method="PATCH", path=r"/api/v1/nodes/.*", count=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            core.patch_node("gpu-a", {"spec": {"unschedulable": True}})
        assert err.value.status == 503
        assert _status(err.value)["kind"] == "Status"
    core.patch_node("gpu-a", {"spec": {"unschedulable": True}})
    assert fault.hits == 2
    assert fault.exhausted
    patches = [r.status for r in sim.requests if r.method == "PATCH"]
    assert patches == [503, 503, 200]


def test_fault_429_carries_retry_after(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    # PATCH: urllib3 would transparently retry a GET that carries Retry-After
    sim.faults.inject(status=429, path=r"/api/v1/nodes/gpu-a", count=1, retry_after=3)
    with pytest.raises(ApiException) as err:
        core.patch_node("gpu-a", {"spec": {"unschedulable": True}})
    assert err.value.status == 429
    assert err.value.headers is not None
    assert err.value.headers["Retry-After"] == "3"


def test_fault_latency(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    handle = sim.faults.inject(latency=0.2, method="GET", path=r"/api/v1/nodes/gpu-a")
    start = time.perf_counter()
    core.read_node("gpu-a")
    assert time.perf_counter() - start >= 0.2
    assert handle.hits == 1
    handle.remove()
    core.read_node("gpu-a")
    assert handle.hits == 1  # removed: the next request is not delayed (no figure timed here)


def test_fault_reset_drops_the_connection(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    # urllib3 retries a dropped connection a few times by itself: outlast its retries
    fault = sim.faults.inject(reset=True, method="PATCH", count=10)
    with pytest.raises(urllib3.exceptions.HTTPError):  # ProtocolError / MaxRetryError: no HTTP answer
        core.patch_node("gpu-a", {"spec": {"unschedulable": True}})
    fault.remove()
    core.patch_node("gpu-a", {"spec": {"unschedulable": True}})  # the next one works
    statuses = [r.status for r in sim.requests if r.method == "PATCH"]
    assert statuses[-1] == 200
    assert set(statuses[:-1]) == {0}
    assert fault.hits == len(statuses) - 1


def test_fault_limited_by_sim_time(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    sim.faults.inject(status=500, path=r"/api/v1/nodes/.*", duration=10)
    with pytest.raises(ApiException):
        core.read_node("gpu-a")
    sim.clock.advance(10)
    assert core.read_node("gpu-a").metadata.name == "gpu-a"


def test_request_log_records_method_path_query_and_user_agent(core: Any, sim: KubeSim) -> None:
    core.list_node(label_selector="a=b")
    rec = sim.requests[-1]
    assert (rec.method, rec.path, rec.query, rec.status) == ("GET", "/api/v1/nodes", {"labelSelector": ["a=b"]}, 200)
    assert rec.user_agent.startswith("OpenAPI-Generator")
    assert rec.duration < 1


def test_custom_resources_nodepool_and_nodeclaim(sim: KubeSim, node: dict[str, Any]) -> None:
    custom: Any = client.CustomObjectsApi(sim.api_client())
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", b.nodepool("gpu-training"))
    custom.create_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", b.nodeclaim_for(node, "claim-a"))
    pools = custom.list_cluster_custom_object("karpenter.sh", "v1", "nodepools")
    assert pools["kind"] == "NodePoolList"
    assert [p["metadata"]["name"] for p in pools["items"]] == ["gpu-training"]
    # merge patch (the client's default for custom objects) works
    custom.patch_cluster_custom_object(
        "karpenter.sh", "v1", "nodepools", "gpu-training", {"spec": {"limits": {"nvidia.com/gpu": "8"}}}
    )
    pool = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu-training")
    assert pool["spec"]["limits"]["nvidia.com/gpu"] == "8"
    # json patch works
    custom.patch_cluster_custom_object(
        "karpenter.sh",
        "v1",
        "nodepools",
        "gpu-training",
        [{"op": "replace", "path": "/spec/disruption/budgets", "value": [{"nodes": "0"}]}],
        _content_type="application/json-patch+json",
    )
    pool = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu-training")
    assert pool["spec"]["disruption"]["budgets"] == [{"nodes": "0"}]
    # strategic merge is not supported for custom resources: 415 like the real server
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object(
            "karpenter.sh",
            "v1",
            "nodepools",
            "gpu-training",
            {"spec": {}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert err.value.status == 415
    # this client sends merge-patch by default for custom objects, even for a list body: 400
    with pytest.raises(ApiException) as err:
        custom.patch_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu-training", [{"op": "x"}])
    assert err.value.status == 400
    claim = custom.get_cluster_custom_object("karpenter.sh", "v1", "nodeclaims", "claim-a")
    assert claim["status"]["nodeName"] == "gpu-a"
    custom.delete_cluster_custom_object("karpenter.sh", "v1", "nodepools", "gpu-training")
    assert custom.list_cluster_custom_object("karpenter.sh", "v1", "nodepools")["items"] == []


def test_core_and_events_k8s_io_events(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name="gpu-a."),
        involved_object=client.V1ObjectReference(kind="Node", name="gpu-a", uid=node["metadata"]["uid"]),
        reason="GpuwardenCordoned",
        message="cordoned",
        type="Normal",
        source=client.V1EventSource(component="gpuwarden"),
    )
    created = core.create_namespaced_event("default", event)
    assert created.metadata.name.startswith("gpu-a.")
    found = core.list_namespaced_event(
        "default", field_selector="involvedObject.name=gpu-a,reason=GpuwardenCordoned"
    ).items
    assert [e.reason for e in found] == ["GpuwardenCordoned"]
    events_api: Any = client.EventsV1Api(sim.api_client())
    events_api.create_namespaced_event(
        "default",
        client.EventsV1Event(
            metadata=client.V1ObjectMeta(name="gpu-a.drain"),
            event_time=sim.clock.now(),
            reason="DrainCompleted",
            action="Drain",
            reporting_controller="gpuwarden.io/gpuwarden",
            reporting_instance="gpuwarden-1",
            regarding=client.V1ObjectReference(kind="Node", name="gpu-a"),
            type="Normal",
        ),
    )
    assert [e.reason for e in events_api.list_event_for_all_namespaces().items] == ["DrainCompleted"]


def test_apps_and_batch_owners_are_served(sim: KubeSim) -> None:
    b.gpu_cluster(sim, nodes=2)
    apps: Any = client.AppsV1Api(sim.api_client())
    assert [d.metadata.name for d in apps.list_namespaced_daemon_set("kube-system").items] == ["nvidia-device-plugin"]
    assert apps.read_namespaced_replica_set("inference-6d4cf56db", "serving").spec.replicas == 3
    assert len(client.BatchV1Api(sim.api_client()).list_namespaced_job("ml").items) == 1


def test_patch_get_round_trips_keep_one_connection(sim: KubeSim, core: Any, node: dict[str, Any]) -> None:
    """What made round trips cheap is a kept-alive connection, not a figure this test could time
    (speed lives in `make bench`): 50 patches each read back, all over the one socket."""
    core.read_node("gpu-a")  # open the connection
    seen: set[int] = set()
    for i in range(50):
        core.patch_node("gpu-a", {"metadata": {"annotations": {"n": str(i)}}})
        assert core.read_node("gpu-a").metadata.annotations["n"] == str(i)
        with sim._state.lock:
            seen.update(id(c) for c in sim._state.connections)
    assert len(seen) == 1


def test_a_list_over_http_is_the_list_document_byte_for_byte(sim: KubeSim) -> None:
    """The server encodes list answers straight from the stored objects (`Api.list_body`); the
    bytes are those of the list document `Api.list` + `list_doc` give."""
    import json

    import urllib3

    n1 = sim.create(b.gpu_node("gpu-a", "i-0aaa"))
    sim.create(b.pod("a-0", n1, namespace="ml"))
    sim.create(b.pod("a-1", n1, namespace="ml", labels={"app": "x"}))
    sim.create(b.pdb("budget", "ml", {"app": "x"}, min_available=1))
    http = urllib3.PoolManager()
    for path, kind, ns, labels, fields in [
        ("/api/v1/nodes", "Node", None, None, None),
        ("/api/v1/pods?fieldSelector=spec.nodeName%3Dgpu-a", "Pod", None, None, "spec.nodeName=gpu-a"),
        ("/api/v1/namespaces/ml/pods?labelSelector=app%3Dx", "Pod", "ml", "app=x", None),
        ("/apis/policy/v1/namespaces/ml/poddisruptionbudgets", "PodDisruptionBudget", "ml", None, None),
    ]:
        got = http.request("GET", sim.url + path).data
        rtype = sim.rtype(kind)
        items, rv = sim.api.list(rtype, ns, labels, fields)
        assert got == json.dumps(sim.api.list_doc(rtype, items, rv), separators=(",", ":")).encode(), path
