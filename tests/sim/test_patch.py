"""Patch semantics, unit level."""

from __future__ import annotations

import pytest

from sim.apiserver.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from sim.apiserver.selectors import matches, parse_label_selector


def test_merge_patch_rfc7386_examples() -> None:
    target = {"a": "b", "c": {"d": "e", "f": "g"}}
    assert merge_patch(target, {"a": "z", "c": {"f": None}}) == {"a": "z", "c": {"d": "e"}}
    assert merge_patch({"a": [1, 2]}, {"a": [3]}) == {"a": [3]}
    assert merge_patch({"a": "b"}, {"b": {"c": None}}) == {"a": "b", "b": {}}


def test_json_patch_rfc6902_ops() -> None:
    doc = {"a": {"b": [1, 2]}, "t": "x"}
    out = json_patch(
        doc,
        [
            {"op": "add", "path": "/a/b/-", "value": 3},
            {"op": "remove", "path": "/a/b/0"},
            {"op": "replace", "path": "/t", "value": "y"},
            {"op": "copy", "from": "/t", "path": "/u"},
            {"op": "move", "from": "/u", "path": "/v"},
            {"op": "test", "path": "/v", "value": "y"},
            {"op": "add", "path": "/k~1x", "value": 1},
        ],
    )
    assert out == {"a": {"b": [2, 3]}, "t": "y", "v": "y", "k/x": 1}
    assert doc == {"a": {"b": [1, 2]}, "t": "x"}  # input untouched
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "test", "path": "/t", "value": "nope"}])
    with pytest.raises(PatchError):
        json_patch(doc, [{"op": "remove", "path": "/missing"}])


def test_strategic_merge_by_key_and_directives() -> None:
    node = {
        "status": {"conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]},
        "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]},
        "metadata": {"finalizers": ["x"]},
    }
    out = strategic_merge_patch(
        node,
        {
            "status": {
                "conditions": [{"type": "Ready", "status": "False"}, {"type": "DiskPressure", "$patch": "delete"}]
            },
            "spec": {"taints": [{"key": "b", "effect": "NoExecute"}]},  # no patch strategy: replaced
            "metadata": {"finalizers": ["y"]},
        },
    )
    assert out["status"]["conditions"] == [{"type": "Ready", "status": "False"}]
    assert out["spec"]["taints"] == [{"key": "b", "effect": "NoExecute"}]
    assert out["metadata"]["finalizers"] == ["x", "y"]
    removed = strategic_merge_patch(out, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}})
    assert removed["metadata"]["finalizers"] == ["y"]


def test_label_selector_syntax() -> None:
    labels = {"app": "web", "tier": "gpu", "n": "5"}
    assert matches(parse_label_selector("app=web,tier in (gpu, cpu),!missing"), labels)
    assert matches(parse_label_selector("app==web,tier notin (cpu),n>3"), labels)
    assert not matches(parse_label_selector("app!=web"), labels)
    assert not matches(parse_label_selector("missing"), labels)
