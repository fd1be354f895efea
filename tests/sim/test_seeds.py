"""The seed articles' manifests (sim/seeds/): admitted as written, and the simulator filled with them
as the controllers would have left it (docs/protections.md, "The seeds' manifests")."""

from __future__ import annotations

from typing import Any

import pytest

from sim import KubeSim
from sim.apiserver.karpenter_crds import GROUP
from sim.seeds import (
    LONG_TRAINING_JOB,
    TRAINING_JOB,
    TRITON,
    nodepools,
    on_plane,
    seed_cluster,
    workload,
    workloads,
)

SEED_POOLS = {"gpu-training", "gpu-inference", "gpu-general", "inferentia"}


def test_every_seed_nodepool_is_admitted_by_karpenters_crd_rules(sim: KubeSim) -> None:
    pools = nodepools()
    assert set(pools) >= SEED_POOLS
    tiers = sorted((p for p in pools.values() if "weight" in p["spec"]), key=lambda p: -p["spec"]["weight"])
    assert [t["spec"]["template"]["spec"]["requirements"][1]["values"] for t in tiers] == [
        ["spot"],
        ["spot"],
        ["on-demand"],
    ]
    for pool in pools.values():
        stored = sim.create(pool)  # 422 Invalid for a budget, duration or quantity Karpenter's CRD refuses
        assert stored["apiVersion"].startswith(GROUP)


def test_the_training_pool_is_written_as_the_seeds_say() -> None:
    training = nodepools()["gpu-training"]
    assert training["spec"]["template"]["spec"]["expireAfter"] == "720h"
    assert "terminationGracePeriod" not in training["spec"]["template"]["spec"]
    assert {"nodes": "0"}.items() <= training["spec"]["disruption"]["budgets"][1].items()
    assert nodepools()["gpu-general"]["spec"]["template"]["spec"]["expireAfter"] == "336h"


def test_the_workloads_are_as_written() -> None:
    job = workload("Job", TRAINING_JOB)["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 4, 4)
    assert job["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert job["template"]["spec"]["terminationGracePeriodSeconds"] == 300
    assert not any(k.startswith("gpuwarden.io/") for k in job["template"].get("metadata", {}).get("annotations", {}))
    bare = workload("Pod", LONG_TRAINING_JOB)
    assert bare["metadata"]["annotations"] == {"karpenter.sh/do-not-disrupt": "true"}
    assert bare["spec"]["terminationGracePeriodSeconds"] == 300
    assert workload("PodDisruptionBudget", TRITON)["spec"]["selector"]["matchLabels"] == {"app": TRITON}
    assert [d["kind"] for d in workloads()].count("Namespace") == 2


def test_on_plane_swaps_only_the_node_class_and_instance_types() -> None:
    ref = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
    pool = on_plane(nodepools()["gpu-training"], ref, ["p4d.24xlarge"])
    spec = pool["spec"]["template"]["spec"]
    assert spec["nodeClassRef"] == ref
    assert {r["key"]: r["values"] for r in spec["requirements"]}["node.kubernetes.io/instance-type"] == ["p4d.24xlarge"]
    assert pool["spec"]["disruption"] == nodepools()["gpu-training"]["spec"]["disruption"]


def _pod(sim: KubeSim, key: str) -> dict[str, Any]:
    namespace, name = key.split("/")
    found = sim.get("Pod", name, namespace)
    assert found is not None, key
    return found


@pytest.mark.parametrize("pools", [None, ("gpu-training", "gpu-inference")])
def test_seed_cluster_places_every_workload_one_rank_per_node(sim: KubeSim, pools: tuple[str, ...] | None) -> None:
    made = seed_cluster(sim, pools=pools)
    ranks = made.training_ranks()
    assert len(ranks) == 4
    assert len({made.node_of[r] for r in ranks}) == 4
    indexes = sorted(_pod(sim, r)["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for r in ranks)
    assert indexes == ["0", "1", "2", "3"]
    assert all(_pod(sim, r)["spec"]["terminationGracePeriodSeconds"] == 300 for r in ranks)
    (long_job,) = made.pods[LONG_TRAINING_JOB]
    assert made.node_of[long_job] not in {made.node_of[r] for r in ranks}
    assert len(made.pods[TRITON]) == 3
    claims = sim.list("NodeClaim")
    assert len(claims) == 8
    assert {c["spec"]["expireAfter"] for c in claims} == {"720h"}
