"""The Karpenter versions gpuwarden supports (docs/cluster.md, "Karpenter versions"): doctor's
``karpenter-version`` on clusters running v0.37, v1.0.1, v1.14.1 and a newer minor, and what v1.0.x
lacks that gpuwarden reads, on the simulator. v1.0.x writes no ``DisruptionReason`` condition on a
NodeClaim it disrupts (kubernetes-sigs/karpenter v1.0.x ``pkg/apis/v1/nodeclaim_status.go`` has none;
v1.2.0 adds it): the node's ``karpenter.sh/disrupted`` taint is its only sign."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpuwarden.kinds.inputs import parse_notices
from gpuwarden.services.dispatch import handle_batch
from gpuwarden.services.doctor import versions
from realplane.build import pins
from sim import KubeSim
from sim.actors.karpenter.installs import karpenter_deployment
from sim.builders import nodeclaim_for
from sim.clock import rfc3339
from tests.integration.conftest import World, load_event
from tests.integration.doctor_cli import by_check, doctor, healthy_cluster, put_gpu_metric
from tests.integration.scenarios import NODE, spot_node

DISRUPTED = {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}


def version_finding(sim: KubeSim, tmp_path: Path, version: str, **labels: str) -> tuple[int, dict[str, str]]:
    """The doctor on a healthy cluster whose Karpenter Deployment runs ``version`` (its image tag)."""
    healthy_cluster(sim)
    sim.delete_direct("Deployment", "karpenter", "kube-system")
    deployment = karpenter_deployment(queue=None, version=version)
    deployment["metadata"]["labels"] |= labels
    sim.create(deployment)
    put_gpu_metric()
    code, report = doctor(sim, tmp_path)
    return code, by_check(report)["karpenter-version"]


def test_karpenter_1_0_is_supported_and_doctor_says_what_it_lacks(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    code, finding = version_finding(sim, tmp_path, "1.0.1")
    assert finding["severity"] == "ok", finding
    assert "kube-system/karpenter 1.0.1" in finding["message"]
    assert "before v1.2.0, the NodeClaim condition DisruptionReason" in finding["message"]
    assert "before v1.1.0, the NodeRepair feature gate" in finding["message"]
    assert code == 0


def test_the_tested_karpenter_lacks_nothing(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    _, finding = version_finding(sim, tmp_path, "1.14.1")
    assert finding["severity"] == "ok", finding
    assert "before" not in finding["message"]
    assert "supports Karpenter v1.0.0 to v1.14.x (tested on v1.0.8 and v1.14.1)" in finding["message"]


def test_doctor_names_the_releases_the_real_plane_runs() -> None:
    """doctor's tested releases are the real plane's two Karpenter pins (tests/e2e: every_karpenter)."""
    pinned = pins.load_pins()
    assert versions.parse(pinned["karpenter"]["version"]) == versions.TESTED
    assert versions.parse(pinned["karpenter-oldest"]["version"]) == versions.TESTED_OLDEST


def test_helms_version_label_is_read_before_the_image_tag(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    # an image pinned by digest only still carries Helm's app.kubernetes.io/version label
    _, finding = version_finding(sim, tmp_path, "latest", **{"app.kubernetes.io/version": "1.1.2"})
    assert "kube-system/karpenter 1.1.2" in finding["message"], finding
    assert "DisruptionReason" in finding["message"]
    assert "NodeRepair" not in finding["message"]


def test_a_v1beta1_karpenter_is_an_error(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    code, finding = version_finding(sim, tmp_path, "0.37.0")
    assert finding["severity"] == "error", finding
    assert "serves karpenter.sh/v1beta1 only" in finding["message"]
    assert code == 1


@pytest.mark.parametrize(("version", "severity"), [("1.15.0", "warn"), ("1.14.9", "ok"), ("nightly", "warn")])
def test_a_minor_newer_than_tested_or_no_version_is_a_warning(
    sim: KubeSim, aws: None, tmp_path: Path, version: str, severity: str
) -> None:
    _, finding = version_finding(sim, tmp_path, version)
    assert finding["severity"] == severity, finding


# --------------------------------------------------------------------------- v1.0.x's disruption, no condition


def _spot_warning_on_a_node_karpenter_1_0_disrupts(world: World) -> tuple[str, dict[str, Any]]:
    """Karpenter v1.0.x's disruption queue has tainted the node (``karpenter.sh/disrupted``) and
    written no condition on its NodeClaim; then the node's Spot warning arrives."""
    spot_node(world.sim, modes=("annotate",), inference=0, pdb_min_available=None, grace=2)
    claim = world.sim.create(nodeclaim_for(world.node(NODE)))["metadata"]
    owner = {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "name": claim["name"], "uid": claim["uid"]}
    taints = world.node(NODE)["spec"].get("taints") or []
    world.sim.patch_direct(
        "Node", NODE, {"metadata": {"ownerReferences": [owner]}, "spec": {"taints": [*taints, DISRUPTED]}}
    )
    conditions = (world.sim.get("NodeClaim", claim["name"]) or {})["status"]["conditions"]
    assert "DisruptionReason" not in {c["type"] for c in conditions}  # v1.0.x writes none
    event = load_event("spot-interruption.json", time=rfc3339(world.sim.clock.now()))
    return str(claim["name"]), handle_batch(parse_notices(event), world.deps()).to_json()


def test_on_karpenter_1_0_a_disrupted_node_is_left_to_karpenter_by_its_taint_alone(world: World) -> None:
    claim, result = _spot_warning_on_a_node_karpenter_1_0_disrupts(world)
    # Then its pods are still asked to checkpoint, and no second replacement is launched
    types = [a["type"] for a in result["actions"]]
    assert "checkpoint-requested" in types, result
    skipped = [a for a in result["actions"] if a["type"] == "replacement-skipped"]
    assert [a["reason"] for a in skipped] == [f"left to Karpenter: node {NODE} is tainted karpenter.sh/disrupted"]
    assert [c["metadata"]["name"] for c in world.sim.list("NodeClaim")] == [claim]
