"""`gpuwarden doctor`'s `checkpoint-coverage` on the simulator (docs/cli.md, "doctor"): the seeds' own
training Job, which no checkpoint request reaches and whose grace a Spot notice cuts, is named."""

from __future__ import annotations

from pathlib import Path

from gpuwarden.domain import annotations as ann
from sim import KubeSim
from sim import builders as b
from sim.seeds import TRAINING_JOB, seed_cluster
from sim.training_jobs import pytorchjob_pod
from tests.integration.doctor_cli import by_check, doctor


def test_the_seeds_indexed_job_is_named_with_the_annotation_to_add_and_its_grace(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    # Given the seeds' cluster: the four-rank Job as written (no gpuwarden annotation, 300 s grace)
    seed_cluster(sim)
    # When the doctor runs
    _, report = doctor(sim, tmp_path)
    # Then checkpoint-coverage warns, naming the Job, the annotation to add, and its grace
    finding = by_check(report)["checkpoint-coverage"]
    assert finding["severity"] == "warn", finding
    assert f"Job ml/{TRAINING_JOB} (4 accelerator pods)" in finding["message"], finding
    assert "300 s, longer than the 120 s a Spot notice leaves" in finding["message"], finding
    assert "gpuwarden.io/checkpoint: annotate" in finding["fix"], finding
    assert "SIGTERM within 120 s" in finding["fix"], finding
    # Triton (a Deployment) is no training workload; long-training-job has no controller
    assert "triton" not in finding["message"]


def test_a_workload_opted_in_is_covered_and_a_pytorchjob_is_named_by_kind(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    # Given an opted-in PyTorchJob's master (30 s grace) and a bare PyTorchJob beside it
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node("ip-10-0-8-1.us-west-2.compute.internal", "i-08000000000000001"))
    sim.create(pytorchjob_pod("opted", "Master", 0, node, checkpoint="annotate"))
    sim.create(pytorchjob_pod("bare", "Master", 0, node, checkpoint=None))
    # When the doctor runs
    _, report = doctor(sim, tmp_path)
    # Then only the bare one is named
    finding = by_check(report)["checkpoint-coverage"]
    assert "PyTorchJob ml/bare" in finding["message"], finding
    assert "ml/opted" not in finding["message"], finding
    # and once it opts in, nothing is
    pod = next(p for p in sim.list("Pod", "ml") if p["metadata"]["name"].startswith("bare"))
    sim.patch_direct("Pod", pod["metadata"]["name"], {"metadata": {"annotations": {ann.CHECKPOINT: "annotate"}}}, "ml")
    _, again = doctor(sim, tmp_path)
    assert by_check(again)["checkpoint-coverage"]["severity"] == "ok", by_check(again)["checkpoint-coverage"]
