"""The week at ten times the cluster, affordable (docs/simulate.md#at-ten-times-the-cluster): in the
outcome runs the Karpenter stand-in, one of the simulator's own actors, reads the store in-process and
without copies instead of listing every node, NodeClaim and pod over HTTP at each step. What it reads
must be what the server would have answered, and must stay as it was read while others write.
gpuwarden still talks to the simulator over HTTP (its GETs are checked here too)."""

from __future__ import annotations

from typing import Any

import pytest

from sim import KubeSim
from sim import builders as b
from sim.actors.karpenter import Karpenter
from sim.actors.karpenter.objects import NODECLAIMS, NODEPOOLS, NODES, PDBS
from sim.apiserver.jsondoc import clone
from sim.outcome.engine import OutcomeSim
from sim.outcome.runner import Arm
from tests.sim.outcome_scenarios import arm, tiny

NODE, INSTANCE = "ip-10-0-1-23.us-west-2.compute.internal", "i-0abc1234def567890"


def _cluster(sim: KubeSim) -> None:
    sim.create(b.nodepool("gpu-training"))
    node = sim.create(b.gpu_node(NODE, INSTANCE, ip="10.0.1.23"))
    sim.create(b.nodeclaim_for(node))
    sim.create(b.training_pod("train-0", NODE, gpus=8))
    sim.create(b.training_pod("waiting-0", "", gpus=8))
    sim.create(b.pdb("serving", "serving", {"app": "serving"}, min_available=1))


@pytest.mark.parametrize(
    ("path", "field_selector"),
    [
        (NODES, None),
        (NODECLAIMS, None),
        (NODEPOOLS, None),
        ("/api/v1/pods", None),
        ("/api/v1/pods", f"spec.nodeName={NODE}"),
        ("/api/v1/pods", "spec.nodeName="),
        (PDBS, None),
    ],
)
def test_the_stand_ins_direct_reads_are_what_the_server_answers(path: str, field_selector: str | None) -> None:
    with KubeSim() as sim:
        _cluster(sim)
        over_http = Karpenter(sim).cluster
        direct = Karpenter(sim).cluster
        direct.direct_reads = True
        sim.clear_requests()
        # When the same list is read both ways
        items = direct.items(path, field_selector)
        assert not sim.requests  # in-process: no request reached the server
        # Then the objects are the server's answer, in its order
        assert items == over_http.items(path, field_selector)
        assert items


def test_a_direct_get_is_the_servers_answer_and_a_missing_object_is_none() -> None:
    with KubeSim() as sim:
        _cluster(sim)
        direct = Karpenter(sim).cluster
        direct.direct_reads = True
        path = "/api/v1/namespaces/ml/pods/train-0"
        assert direct.get(path) == Karpenter(sim).cluster.get(path)
        assert direct.get("/api/v1/namespaces/ml/pods/gone-0") is None


@pytest.mark.parametrize("write", ["patch", "delete"])
def test_what_a_shared_read_holds_stays_as_read_when_the_object_is_written(write: str) -> None:
    with KubeSim() as sim:
        _cluster(sim)
        (held,) = sim.api.list_shared(sim.rtype("Node"))
        as_read = clone(held)
        # When the node is written (a delete with no finalizer removes it at once, its version bumped)
        if write == "patch":
            sim.patch_direct("Node", NODE, {"metadata": {"labels": {"written": "after-the-read"}}})
        else:
            sim.delete_direct("Node", NODE)
            assert sim.get("Node", NODE) is None
        # Then what the reader holds is still what it read
        assert held == as_read


def test_in_the_outcome_runs_karpenter_lists_nothing_over_http_and_gpuwarden_still_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, list[Any]] = {}
    stop = OutcomeSim.stop

    def keep_requests(self: OutcomeSim) -> None:
        seen.setdefault("requests", []).extend(self.requests)
        stop(self)

    monkeypatch.setattr(OutcomeSim, "stop", keep_requests)
    # When gpuwarden's arm runs the one-node week through its Spot interruption
    result = arm(tiny(), Arm.GPUWARDEN, rank=0)
    assert result.figures["interruptions"] == 1
    gets = [r for r in seen["requests"] if r.method == "GET"]
    # Then Karpenter read in-process (it still writes over HTTP: its eviction, its NodeClaim) ...
    assert not [r for r in gets if r.user_agent.startswith("karpenter/")]
    assert [r for r in seen["requests"] if r.user_agent.startswith("karpenter/") and r.method != "GET"]
    # ... and gpuwarden read through the kubernetes client over HTTP
    assert [r for r in gets if r.user_agent.startswith("OpenAPI-Generator")]


def test_the_server_encodes_each_stored_version_once_and_a_write_is_sent_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sim.apiserver import encodings

    calls: list[str] = []
    encode = encodings.encoded

    def counting(obj: dict[str, Any]) -> str:
        calls.append(obj["metadata"]["name"])
        return encode(obj)

    monkeypatch.setattr(encodings, "encoded", counting)
    with KubeSim() as sim:
        _cluster(sim)
        reads = Karpenter(sim).cluster  # over HTTP
        # When the nodes are listed twice, then the node is written and listed again
        first, second = reads.items(NODES), reads.items(NODES)
        sim.patch_direct("Node", NODE, {"metadata": {"labels": {"written": "between-the-lists"}}})
        third = reads.items(NODES)
    # Then the unchanged version was encoded once, the written one once more, and each list is current
    assert calls == [NODE, NODE]
    assert first == second
    assert third[0]["metadata"]["labels"]["written"] == "between-the-lists"
