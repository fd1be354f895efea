"""A LIST's ``limit`` and ``continue`` on the simulator, as kube-apiserver answers them
(sim/apiserver/paging.py), through the official client and through kubectl's chunked reads."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from sim import KubeSim
from sim import builders as b
from tests.sim.kubectl import kubectl


def _nodes(sim: KubeSim, count: int) -> list[str]:
    names = [f"gpu-{i:03d}" for i in range(count)]
    for i, name in enumerate(names):
        sim.create(b.gpu_node(name, f"i-{i:017x}", capacity_type="spot" if i % 2 else "on-demand"))
    return names


def test_a_limited_list_comes_in_pages_that_together_are_the_whole_list_once(sim: KubeSim, core: Any) -> None:
    # Given 7 nodes
    names = _nodes(sim, 7)
    # When they are listed 3 at a time, following each answer's continue token
    seen: list[str] = []
    remaining: list[int | None] = []
    token: str | None = None
    while True:
        page = core.list_node(limit=3, _continue=token) if token else core.list_node(limit=3)
        seen += [n.metadata.name for n in page.items]
        remaining.append(page.metadata.remaining_item_count)
        token = page.metadata._continue
        if not token:
            break
    # Then every node came once, in name order, in pages of 3, 3 and 1, with the counts of what was left
    assert seen == names
    assert remaining == [4, 1, None]


def test_a_selected_list_pages_what_the_selector_keeps_and_counts_nothing(sim: KubeSim, core: Any) -> None:
    _nodes(sim, 7)
    first = core.list_node(limit=2, label_selector="karpenter.sh/capacity-type=spot")
    assert [n.metadata.name for n in first.items] == ["gpu-001", "gpu-003"]
    assert first.metadata.remaining_item_count is None  # the real server counts only unfiltered lists
    rest = core.list_node(limit=2, label_selector="karpenter.sh/capacity-type=spot", _continue=first.metadata._continue)
    assert [n.metadata.name for n in rest.items] == ["gpu-005"]
    assert rest.metadata._continue is None


def test_an_unlimited_list_is_one_answer_and_a_bad_token_is_refused(sim: KubeSim, core: Any) -> None:
    _nodes(sim, 3)
    whole = core.list_node()
    assert len(whole.items) == 3
    assert whole.metadata._continue is None
    with pytest.raises(ApiException) as refused:
        core.list_node(limit=2, _continue="not-a-token")
    assert refused.value.status == 400
    assert "continue key is not valid" in json.loads(refused.value.body or "{}")["message"]


def test_kubectl_reads_every_node_in_chunks(sim: KubeSim) -> None:
    names = _nodes(sim, 5)
    listed = kubectl(sim, "get", "nodes", "--chunk-size=2", "-o", "name")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == [f"node/{n}" for n in names]
    table = kubectl(sim, "get", "nodes", "--chunk-size=2", "--no-headers")
    assert [line.split()[0] for line in table.stdout.splitlines()] == names
