"""A new kind is its name, one spec and its source model: nothing else in functions/ changes.

Given a copy of the runtime package with exactly that added (one line in `domain.notice.Kind`, and
either one new module in `gpuwarden/kinds/` holding the toy kind's EventBridge model, its policy
section and its spec, or a fat kind's room: `gpuwarden/kinds/<kind>/` with its policy section in
`policy.py` beside the spec), when a sample event of the toy kind is run through the copy as `gpuwarden invoke` runs
one (the deployed rules' filter, the dispatch, the one sequence) against the simulator, then the
node is cordoned, tainted with the toy kind, its opted-in pod asked to checkpoint and the node
drained; the registry routes the event to the spec's function, the stack would deploy the spec's
rule, the policy document takes the kind's section, and its switch turns the kind off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "functions" / "gpuwarden"

#: The toy kind: an EventBridge event asking gpuwarden to take one node out before a deadline.
TOY_SPEC = '''"""`toy-reclaim`: a toy kind, for tests/unit/test_adding_a_kind.py."""

from typing import Literal

from pydantic import Field

from gpuwarden.domain.decide import drain_with
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.policy import Frozen
from gpuwarden.kinds.spec import KindSpec, PolicySection
from gpuwarden.services.engine import karpenter
from gpuwarden.services.engine.disrupt import disrupt
from gpuwarden.services.engine.hooks import Admission, KindHooks
from gpuwarden.sources import Envelope, NoticeBatch
from gpuwarden.sources._common import FrozenModel, NodeName, add_seconds
from gpuwarden.sources.rules import rule_of


class ToyReclaimPolicy(Frozen):
    """The kind's own policy section: `toy_reclaim: {enabled, note}`."""

    enabled: bool = True
    note: str = ""


class ToyDetail(FrozenModel):
    node: NodeName
    seconds: int = 120


class ToyReclaimRequest(Envelope):
    """The toy kind's source model."""

    source: Literal["example.toy"]
    detail_type: Literal["Toy Reclaim Request"] = Field(alias="detail-type")
    detail: ToyDetail

    def to_batch(self) -> NoticeBatch:
        deadline = add_seconds(self.time, self.detail.seconds, field="detail.seconds")
        notice = self.notice(Kind.TOY_RECLAIM, node_name=self.detail.node, deadline=deadline)
        return NoticeBatch(notices=(notice,), kind=Kind.TOY_RECLAIM)


SPEC = KindSpec(
    kind=Kind.TOY_RECLAIM,
    summary="a toy: take one node out before a deadline",
    voluntary=False,
    route="interruption",
    doc="docs/events.md#the-kinds",
    hooks=KindHooks(
        admission=Admission(plan=drain_with("toy reclaim: out before the deadline", replace=False)),
        delivery=karpenter.INVOLUNTARY,
    ),
    handle=disrupt,
    switch="toy_reclaim.enabled",
    policy=PolicySection("toy_reclaim", ToyReclaimPolicy),
    models=(ToyReclaimRequest,),
    rules=lambda _: (rule_of("ToyReclaim", "toy reclaim requests", ToyReclaimRequest),),
)
'''

#: The toy kind's policy section, as `TOY_SPEC` holds it.
TOY_POLICY = '''class ToyReclaimPolicy(Frozen):
    """The kind's own policy section: `toy_reclaim: {enabled, note}`."""

    enabled: bool = True
    note: str = ""


'''

#: Run in the copy: the simulator, a GPU node with a checkpointing trainer, the toy event invoked.
SCENARIO = """
import json, sys
from sim import KubeSim
from sim.actors.workloads import Workloads
from sim.builders import gpu_node, training_pod
from sim.clock import rfc3339
from sim.wiring import sim_deps
import gpuwarden
from gpuwarden.config import parse_policy
from gpuwarden.domain.errors import InvalidPolicy
from gpuwarden.kinds.inputs import parse_event
from gpuwarden.domain.policy import section_of
from gpuwarden.kinds.registry import SPECS, SWITCHES, route_of_kind
from gpuwarden.kinds.toy_reclaim import ToyReclaimPolicy
from gpuwarden.local import run_event
from infra.components.event_rules import kind_rules

off = parse_policy('{"cluster": "ml-prod", "toy_reclaim": {"enabled": false, "note": "off"}}', "test")
try:
    parse_policy('{"cluster": "ml-prod", "toy_reclaim": {"enabeld": false}}', "test")
    refused = None
except InvalidPolicy as err:
    refused = str(err)

with KubeSim(clock_speed=20.0) as sim:
    Workloads(sim, delay=1.0).install()
    sim.create(gpu_node("toy-node", "i-0abc1234def567890"))
    sim.create(training_pod("trainer-0", "toy-node", checkpoint="annotate"))
    event = json.loads(sys.argv[1]) | {"time": rfc3339(sim.clock.now())}
    switched_off = run_event(event | {"id": "toy-off"}, sim_deps(sim, caller="test", policy=off))
    result = run_event(event, sim_deps(sim, caller="test"))
    node = sim.get("Node", "toy-node")
    print(json.dumps({
        "package": gpuwarden.__file__,
        "kinds": [s.kind.value for s in SPECS],
        "route": route_of_kind(parse_event(event).kind),
        "rules": [r.name for r in kind_rules("interruption")],
        "switches": list(SWITCHES),
        "section": section_of(off, ToyReclaimPolicy).model_dump(),
        "typo": refused,
        "switched_off": switched_off,
        "result": result,
        "taints": node["spec"].get("taints", []),
        "unschedulable": node["spec"].get("unschedulable"),
        "trainer": sim.get("Pod", "trainer-0", "ml"),
    }))
"""

SAMPLE = {
    "version": "0",
    "id": "6a7e8feb-b491-4cf7-a9f1-bf3703467718",
    "detail-type": "Toy Reclaim Request",
    "source": "example.toy",
    "account": "123456789012",
    "region": "us-west-2",
    "resources": [],
    "detail": {"node": "toy-node", "seconds": 300},
}


#: The toy kind as a fat kind's room: its policy section in the room's `policy.py`, its spec in
#: the room's `__init__.py` (as gpuwarden/kinds/gpu_idle/).
_ROOM_IMPORT = "from gpuwarden.kinds.toy_reclaim.policy import ToyReclaimPolicy\n"
TOY_ROOM = {
    "__init__.py": TOY_SPEC.replace(TOY_POLICY, "").replace(
        "from gpuwarden.kinds.spec import", _ROOM_IMPORT + "from gpuwarden.kinds.spec import"
    ),
    "policy.py": '"""The toy kind\'s section."""\n\nfrom gpuwarden.domain.policy import Frozen\n\n\n' + TOY_POLICY,
}


def _copy_with_the_toy_kind(tmp: Path, room: bool = False) -> Path:
    functions = tmp / "functions"
    shutil.copytree(PACKAGE, functions / "gpuwarden", ignore=shutil.ignore_patterns("__pycache__"))
    enum = functions / "gpuwarden" / "domain" / "notice.py"
    text = enum.read_text(encoding="utf-8")
    last = '    MANUAL = "manual"\n'
    assert last in text
    enum.write_text(text.replace(last, last + '    TOY_RECLAIM = "toy-reclaim"\n'), encoding="utf-8")
    kinds = functions / "gpuwarden" / "kinds"
    if room:
        (kinds / "toy_reclaim").mkdir()
        for name, text in TOY_ROOM.items():
            (kinds / "toy_reclaim" / name).write_text(text, encoding="utf-8")
    else:
        (kinds / "toy_reclaim.py").write_text(TOY_SPEC, encoding="utf-8")
    return functions


def _changed(copy: Path) -> list[str]:
    """Every file of the copy that differs from the package (new or edited)."""
    changed = []
    for path in sorted((copy / "gpuwarden").rglob("*.py")):
        original = PACKAGE / path.relative_to(copy / "gpuwarden")
        if not original.exists() or original.read_bytes() != path.read_bytes():
            changed.append(str(path.relative_to(copy)))
    return changed


ADDED = {
    "thin": ["gpuwarden/kinds/toy_reclaim.py"],
    "room": ["gpuwarden/kinds/toy_reclaim/__init__.py", "gpuwarden/kinds/toy_reclaim/policy.py"],
}


@pytest.mark.parametrize("shape", ["thin", "room"])
def test_a_toy_kind_added_in_one_spec_is_routed_end_to_end(tmp_path: Path, shape: str) -> None:
    # Given the package with a toy kind added: its name, and one module with its model and spec
    # (or its room: the spec, and its policy section beside it)
    copy = _copy_with_the_toy_kind(tmp_path, room=shape == "room")
    assert TOY_POLICY in TOY_SPEC
    assert _changed(copy) == ["gpuwarden/domain/notice.py", *ADDED[shape]]
    # When a toy event is invoked on the simulator through that copy
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(copy), str(ROOT)]), "AWS_DEFAULT_REGION": "us-west-2"}
    for key in ("KUBECONFIG", "GPUWARDEN_POLICY_FILE", "GPUWARDEN_POLICY_PARAMETER", "DRY_RUN", "AWS_ENDPOINT_URL"):
        env.pop(key, None)
    completed = subprocess.run(
        [sys.executable, "-c", SCENARIO, json.dumps(SAMPLE)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr[-4000:]
    seen = json.loads(completed.stdout.strip().splitlines()[-1])
    # Then the copy (not the installed package) ran, and its registry found the toy kind
    assert seen["package"].startswith(str(copy))
    assert "toy-reclaim" in seen["kinds"]
    # and the event went to the spec's function, whose rules the stack would deploy
    assert seen["route"] == "interruption"
    assert "ToyReclaim" in seen["rules"]
    # and the policy takes its section (a typo in it is refused), whose switch turns the kind off
    assert "toy_reclaim.enabled" in seen["switches"]
    assert seen["section"] == {"enabled": False, "note": "off"}
    assert seen["typo"] is not None
    assert "enabeld" in seen["typo"]
    assert seen["switched_off"]["outcome"] == "ignored", seen["switched_off"]
    assert "toy_reclaim.enabled is false" in seen["switched_off"]["reason"]
    # and the one sequence ran it: cordon, checkpoint, drain, in that order
    result = seen["result"]
    assert result["outcome"] == "handled", result
    assert (result["kind"], result["node"]) == ("toy-reclaim", "toy-node")
    types = [a["type"] for a in result["actions"]]
    assert types[0] == "cordon"
    assert types.index("checkpoint-requested") < types.index("evict")
    assert types[-1] == "drain-complete"
    assert {"key": "gpuwarden.io/disruption", "value": "toy-reclaim", "effect": "NoSchedule"} in seen["taints"]
    assert seen["unschedulable"] is True
    assert seen["trainer"] is None  # evicted once it had checkpointed
