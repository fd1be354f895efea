"""A kind's policy section lives in the kind's room and is read through one accessor
(docs/architecture.md, "Adding a kind"; docs/policy.md).

Given the kinds' specs (`KindSpec.policy`) and the source trees read as text, then: every section
a kind declares has its model in that kind's room; `domain.policy.Policy` holds only the shared
sections; no code reads a kind's section as an attribute of a policy (``policy.gpu_idle.…``)
instead of `section_of(policy, GpuIdlePolicy)`; and the document users write keeps its keys.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from gpuwarden import kinds
from gpuwarden.config import Settings, load_policy, parse_policy
from gpuwarden.domain.errors import InvalidPolicy
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Frozen, Policy, section_of, with_sections
from gpuwarden.domain.switches import behaviours
from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from gpuwarden.kinds.karpenter_expiry.policy import KarpenterExpiryPolicy
from gpuwarden.kinds.registry import POLICY, SPECS, SWITCHES, spec_of
from gpuwarden.kinds.spec import KindSpec
from gpuwarden.services.doctor.checks import GPU_IDLE_SWITCH

ROOT = Path(__file__).resolve().parents[2]
TREES = ("functions", "sim", "infra", "tests", "realplane")

#: The sections no one kind owns, and so `Policy` itself holds (docs/architecture.md, "What stays
#: outside the rooms"): the windows, replacement, checkpoint and drain every disrupting kind reads;
#: the alerts map (alert name → kind); gpu_health (the GPU-health scan's: the dispatch's one LIST of
#: nodes, two kinds' scan parts, and the alerts' deadline read it).
SHARED = ("cluster", "windows", "replacement", "checkpoint", "drain", "gpu_health", "alerts")

#: The document's keys, as users write them (docs/policy.md), in the order its errors list them:
#: unchanged by where a model lives.
DOCUMENT_KEYS = (
    *("cluster", "windows", "gpu_idle", "rebalance", "replacement", "checkpoint", "drain"),
    *("capacity_blocks", "karpenter_expiry", "gpu_health", "alerts", "maintenance", "nodepool_windows"),
)


def _specs_by_module() -> list[tuple[str, KindSpec]]:
    """Every spec with the module that defines it (as the registry finds them)."""
    found = []
    for info in pkgutil.walk_packages(kinds.__path__, prefix=f"{kinds.__name__}."):
        spec = getattr(importlib.import_module(info.name), "SPEC", None)
        if isinstance(spec, KindSpec):
            found.append((info.name, spec))
    return found


def _room(module: str) -> str:
    """A kind's room: its package under gpuwarden/kinds/, or a thin kind's one module."""
    return ".".join(module.split(".")[:3])


def test_every_kinds_section_lives_in_its_room() -> None:
    specs = _specs_by_module()
    assert {spec.kind for _, spec in specs} == set(Kind)
    outside = {
        spec.kind.value: spec.policy.model.__module__
        for module, spec in specs
        if spec.policy is not None and not spec.policy.model.__module__.startswith(_room(module))
    }
    assert outside == {}


def test_the_policy_itself_holds_only_the_shared_sections() -> None:
    assert tuple(Policy.model_fields) == SHARED


def test_every_kind_whose_switch_names_a_section_of_its_own_declares_it() -> None:
    """A kind switched by a section that is not a shared one declares that section in its spec."""
    undeclared = {
        spec.kind.value: spec.switch
        for spec in SPECS
        if spec.switch
        and spec.switch.split(".")[0] not in SHARED
        and (spec.policy is None or spec.policy.key != spec.switch.split(".")[0])
    }
    assert undeclared == {}


def test_the_document_keeps_its_keys_and_defaults() -> None:
    assert tuple(POLICY.model_fields) == DOCUMENT_KEYS
    assert tuple(POLICY.model_json_schema()["properties"]) == DOCUMENT_KEYS
    policy = POLICY(cluster="ml-prod")
    assert section_of(policy, GpuIdlePolicy) == GpuIdlePolicy()
    assert section_of(policy, KarpenterExpiryPolicy).lead_minutes == 30


def test_a_kinds_section_is_read_from_the_document() -> None:
    policy = parse_policy('{"cluster": "c", "gpu_idle": {"threshold_percent": 5}}', "test")
    assert section_of(policy, GpuIdlePolicy).threshold_percent == 5
    assert section_of(Policy(cluster="c"), GpuIdlePolicy) == GpuIdlePolicy()  # a model without it: defaults


def test_the_default_policy_has_every_kinds_section() -> None:
    """No policy configured (a local run): the defaults are the document's model, so doctor's
    behaviours name every kind's switch."""
    policy = load_policy(Settings())
    assert type(policy) is POLICY
    assert list(behaviours(policy, SWITCHES)) == [*SWITCHES, "rebalance.action=drain"]


def test_a_misspelt_key_in_a_kinds_section_is_still_refused_with_the_closest_one() -> None:
    with pytest.raises(InvalidPolicy) as refused:
        parse_policy('{"cluster": "c", "karpenter_expiry": {"lead_minute": 10}}', "test")
    assert refused.value.problems[0].startswith(
        "karpenter_expiry.lead_minute: unknown key (given 10): did you mean `lead_minutes`? Allowed here: enabled,"
    )
    document = {"cluster": "c", "gpu_idle": {}}
    with pytest.raises(ValidationError):
        Policy.model_validate(document)  # `Policy` alone knows no kind's section


def test_the_errors_come_in_the_documents_order() -> None:
    """A kind's section between two shared ones is reported between them, as before the rooms."""
    with pytest.raises(InvalidPolicy) as refused:
        parse_policy('{"cluster": "c", "drain": {"x": 1}, "gpu_idle": {"x": 1}, "rebalance": {"x": 1}}', "test")
    assert [line.split(":")[0] for line in refused.value.problems] == ["gpu_idle.x", "rebalance.x", "drain.x"]


def test_two_sections_may_not_share_a_key_or_a_model() -> None:
    class Other(Frozen):
        enabled: bool = True

    with pytest.raises(TypeError, match="already has: drain"):
        with_sections({"drain": Other})
    with pytest.raises(TypeError, match="share a model: Other"):
        with_sections({"one": Other, "two": Other})


def test_doctor_reads_gpu_idles_own_switch() -> None:
    assert spec_of(Kind.GPU_IDLE).switch == GPU_IDLE_SWITCH


# --------------------------------------------------------------------------- no read past the accessor


def _names_a_policy(node: ast.expr) -> bool:
    """``policy``, ``deps.policy``, ``self.gpu_policy``, ``POLICY.model_validate(…)``, ``Policy(…)``."""
    if isinstance(node, ast.Call):
        return _names_a_policy(node.func)
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "policy" in name.lower() or name in ("model_validate", "model_validate_json", "model_copy")


def reads_past_the_accessor(source: str, keys: set[str]) -> list[str]:
    """Every read of a kind's section that does not go through `section_of`: an attribute of a
    policy (``policy.gpu_idle``) or ``getattr(policy, "gpu_idle")``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in keys and _names_a_policy(node.value):
            found.append(f"{node.lineno}: .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in keys
        ):
            found.append(f"{node.lineno}: getattr {node.args[1].value}")
        if isinstance(node, ast.Call):
            found += [f"{node.lineno}: Policy with {key}" for key in _given_to_policy_alone(node, keys)]
    return sorted(found)


def _given_to_policy_alone(node: ast.Call, keys: set[str]) -> list[str]:
    """A kind's section handed to `Policy` itself (``Policy(gpu_idle=…)``,
    ``Policy.model_validate({"gpu_idle": …})``), which refuses it: the document's model is
    `registry.POLICY`."""
    func = node.func
    if isinstance(func, ast.Name) and func.id == "Policy":
        return [k.arg for k in node.keywords if k.arg in keys]
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "Policy"):
        return []
    document = node.args[0] if node.args else None
    if not isinstance(document, ast.Dict):
        return []
    return [str(k.value) for k in document.keys if isinstance(k, ast.Constant) and k.value in keys]


def _reads_in(root: Path, keys: set[str]) -> dict[str, list[str]]:
    return {
        str(path.relative_to(root)): found
        for tree in TREES
        for path in sorted((root / tree).rglob("*.py"))
        if (found := reads_past_the_accessor(path.read_text(encoding="utf-8"), keys))
    }


def _kinds_keys() -> set[str]:
    return {spec.policy.key for spec in SPECS if spec.policy is not None}


def test_no_code_reads_a_kinds_section_past_the_accessor() -> None:
    assert _kinds_keys() == set(DOCUMENT_KEYS) - set(SHARED)
    assert _reads_in(ROOT, _kinds_keys()) == {}


def test_the_reader_finder_finds_a_read_past_the_accessor() -> None:
    source = (
        "a = deps.policy.gpu_idle.enabled\n"
        "b = getattr(policy, 'maintenance', None)\n"
        "c = POLICY.model_validate(doc).karpenter_expiry\n"
        "d = scenario.maintenance.notice_hours\n"  # not a policy
        "e = section_of(deps.policy, GpuIdlePolicy).enabled\n"
        "f = Policy.model_validate({'cluster': 'c', 'capacity_blocks': {'lead_minutes': 20}})\n"
        "g = Policy(cluster='c', rebalance=None)\n"
        "h = POLICY.model_validate({'cluster': 'c', 'capacity_blocks': {}})\n"
    )
    assert reads_past_the_accessor(source, _kinds_keys()) == [
        "1: .gpu_idle",
        "2: getattr maintenance",
        "3: .karpenter_expiry",
        "6: Policy with capacity_blocks",
        "7: Policy with rebalance",
    ]


def test_the_accessor_finds_a_section_by_its_model_only() -> None:
    class Toy(BaseModel):
        note: str = "default"

    composed = with_sections({"toy": Toy})
    assert section_of(composed.model_validate({"cluster": "c", "toy": {"note": "set"}}), Toy).note == "set"
