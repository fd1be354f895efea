"""`gpuwarden doctor`'s `checkpoint-gangs` on the simulator: what would make a gang's checkpoint fail."""

from __future__ import annotations

from pathlib import Path

from gpuwarden.domain.gangs import ASK, GROUP
from gpuwarden.services.doctor.gangs import runs_torchrun
from sim import KubeSim
from sim import builders as b
from sim.training_jobs import indexed_job_pod, pytorchjob_pod
from tests.integration.doctor_cli import by_check, doctor, healthy_cluster


def nodes(sim: KubeSim, zones: tuple[str, ...]) -> list[dict]:  # type: ignore[type-arg]
    if sim.get("NodePool", "gpu-training") is None:
        sim.create(b.nodepool("gpu-training"))
    return [
        sim.create(b.gpu_node(f"ip-10-0-8-{i}.us-west-2.compute.internal", f"i-08{i:015x}", zone=zone))
        for i, zone in enumerate(zones)
    ]


def test_torchrun_as_pid_1_with_a_signal_checkpoint_is_an_error_that_says_what_to_do(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    # Given the seed's Indexed Job whose trainer container runs torchrun directly, asking for SIGUSR1
    for rank, node in enumerate(nodes(sim, ("us-west-2a", "us-west-2a"))):
        pod = indexed_job_pod("llama-ft", rank, node)
        pod["spec"]["containers"][0]["command"] = ["torchrun", "--nnodes=2", "--node_rank=$(JOB_COMPLETION_INDEX)"]
        pod["spec"]["containers"][0]["args"] = ["train.py"]
        sim.create(pod)
    # When the doctor runs
    code, report = doctor(sim, tmp_path)
    # Then checkpoint-gangs is an error naming the pods, and the fix says what to do instead
    finding = by_check(report)["checkpoint-gangs"]
    assert finding["severity"] == "error"
    assert "which is torchrun" in finding["message"]
    assert "annotate" in finding["fix"]
    assert "traps SIGUSR1" in finding["fix"]
    assert code == 1


def test_a_gang_over_two_zones_with_disagreeing_pods_and_no_leader_is_a_warning(
    sim: KubeSim, aws: None, tmp_path: Path
) -> None:
    # Given a PyTorchJob without a master asking only its leader, spread over two zones,
    # whose workers disagree on the checkpoint mode
    n = nodes(sim, ("us-west-2a", "us-west-2b"))
    sim.create(pytorchjob_pod("bert", "worker", 0, n[0], checkpoint="annotate", annotations={ASK: "leader"}))
    sim.create(pytorchjob_pod("bert", "worker", 1, n[1], checkpoint="signal:SIGUSR1", annotations={ASK: "leader"}))
    # When the doctor runs
    _, report = doctor(sim, tmp_path)
    # Then each problem is named
    finding = by_check(report)["checkpoint-gangs"]
    assert finding["severity"] == "warn"
    assert "ml/bert (kubeflow): its pods differ on gpuwarden.io/checkpoint" in finding["message"]
    assert "asks only its leader, but no pod is its leader" in finding["message"]
    assert "runs in 2 zones (us-west-2a, us-west-2b)" in finding["message"]


def test_bad_gang_input_is_an_error(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    n = nodes(sim, ("us-west-2a",))
    sim.create(indexed_job_pod("x", 0, n[0], annotations={GROUP: "no spaces allowed"}))
    _, report = doctor(sim, tmp_path)
    finding = by_check(report)["checkpoint-gangs"]
    assert finding["severity"] == "error"
    assert "is not a valid label value" in finding["message"]


def test_a_healthy_cluster_has_consistent_gangs(sim: KubeSim, aws: None, tmp_path: Path) -> None:
    healthy_cluster(sim)
    for rank, node in enumerate(nodes(sim, ("us-west-2a", "us-west-2a"))):
        sim.create(indexed_job_pod("llama-ft", rank, node, checkpoint="annotate"))
    _, report = doctor(sim, tmp_path)
    finding = by_check(report)["checkpoint-gangs"]
    assert finding["severity"] == "ok", finding
    assert finding["message"].startswith("1 gang of several pods")


def test_torchrun_is_recognised_in_its_spellings() -> None:
    assert runs_torchrun(["/usr/local/bin/torchrun", "--nnodes=4"])
    assert runs_torchrun(["python3", "-m", "torch.distributed.run", "train.py"])
    assert not runs_torchrun(["/entrypoint.sh", "torchrun"])
    assert not runs_torchrun([])
