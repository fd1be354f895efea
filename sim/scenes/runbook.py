"""Demo scene: the on-call runbook. `plan` a drain of a node, then `drain` it, through the
same runbook service the deployed function and `gpuwarden runbook` run."""

from __future__ import annotations

from typing import Any

from sim.apiserver.core import KubeSim
from sim.scenes.base import SceneSummary, timeline_line
from sim.wiring import sim_deps

NODE = "ip-10-0-2-40.us-west-2.compute.internal"
REASON = "INC-4711: Xid 79 on GPU 3, move the workloads off"


def scene_deps(sim: KubeSim) -> Any:
    from gpuwarden.domain.policy import DrainPolicy, Policy

    policy = Policy(cluster="ml-prod", drain=DrainPolicy(voluntary_limit_seconds=120))
    return sim_deps(sim, caller="oncall@demo", policy=policy)


def runbook_scene(sim: KubeSim) -> SceneSummary:
    from gpuwarden.services.dispatch import handle_runbook
    from gpuwarden.sources import parse_runbook
    from gpuwarden.wiring import runbook_deps

    deps = scene_deps(sim)
    print(f"\nScene — on-call runbook: plan, then drain {NODE}")
    print(f"  $ gpuwarden runbook plan --node {NODE.split('.')[0]}…")
    plan_request = parse_runbook({"action": "plan", "node": NODE, "reason": REASON})
    plan = handle_runbook(plan_request, runbook_deps(deps, plan_request)).to_json()
    print(f"    {plan['reason']}")
    for row in plan["plan"]:
        print(f"    {row['pod']:<44} {row['step']:<7} {row['reason']}")
    print(f'  $ gpuwarden runbook drain --node {NODE.split(".")[0]}… --reason "{REASON}"')
    start = sim.clock.now().replace(microsecond=0)
    drain_request = parse_runbook({"action": "drain", "node": NODE, "reason": REASON})
    result = handle_runbook(drain_request, runbook_deps(deps, drain_request)).to_json()
    shown: set[tuple[str, str]] = set()
    for action in result["actions"]:
        key = (action["type"], str(action.get("pod")))
        if key in shown and action["type"] == "eviction-blocked":
            continue
        shown.add(key)
        print(timeline_line(action, start))
    print(f"    {result['outcome']}: {result['reason']}")
    return SceneSummary.of("runbook drain", result)
