"""Runbook actions (docs/cli.md) through the real services, against the simulator + moto."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from gpuwarden.domain.policy import DrainPolicy, Policy
from gpuwarden.domain.windows import Window
from gpuwarden.services.dispatch import handle_runbook
from gpuwarden.sources import parse_runbook
from gpuwarden.wiring import runbook_deps
from tests.integration.conftest import World, load_event, types
from tests.integration.inputs import runbook
from tests.integration.scenarios import INSTANCE, NODE, spot_node

TAINT = {"key": "gpuwarden.io/disruption", "value": "manual", "effect": "NoSchedule"}
ACTIONS = ("plan", "status", "cordon", "uncordon", "drain", "checkpoint", "replace")


def writes(world: World) -> list[str]:
    return [f"{r.method} {r.path}" for r in world.sim.requests if r.method not in ("GET", "HEAD")]


def frozen_policy(**drain: Any) -> Policy:
    always_open = Window.model_validate(
        {"name": "change-freeze", "schedule": "0 0 * * *", "timezone": "UTC", "duration": "24h", "max_disruptions": 0}
    )
    return Policy(cluster="ml-prod", windows=[always_open], drain=DrainPolicy(**drain))


# --------------------------------------------------------------------------- plan and dry-run


def test_plan_names_every_pod_with_the_step_the_drain_would_take_and_writes_nothing(world: World) -> None:
    # Given the sample cluster: three opted-in trainers, inference pods, a DaemonSet and a mirror pod
    scenario = spot_node(world.sim)
    world.sim.clear_requests()
    # When the sample plan payload (by instance id) is run
    request = parse_runbook(load_event("runbook-plan.json"))
    result = handle_runbook(request, runbook_deps(world.deps(), request)).to_json()
    # Then every pod on the node has a step and a reason, and nothing was written
    assert result["outcome"] == "dry-run"
    assert (result["action"], result["node"], result["dry_run"]) == ("plan", NODE, True)
    steps = {row["pod"]: row["step"] for row in result["plan"]}
    on_node = {f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in world.sim.list("Pod")}
    on_node = {k for k in on_node if world.pod(k)["spec"].get("nodeName") == NODE}  # type: ignore[index]
    assert set(steps) == on_node
    assert all(steps[p] == "signal" for p in scenario.trainers.values())
    assert all(steps[p] == "evict" for p in scenario.inference)
    assert steps[scenario.daemonset_pod] == steps[scenario.mirror_pod] == "skip"
    assert all(row["reason"] for row in result["plan"])
    assert writes(world) == []


@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_in_dry_run_changes_nothing_in_the_cluster(world: World, action: str) -> None:
    # Given a node gpuwarden holds (so uncordon has something to undo) and the sample pods
    spot_node(world.sim)
    runbook(world, action="cordon")
    before = world.node(NODE)
    world.sim.clear_requests()
    # When the action is asked for as a dry run
    result = runbook(world, action=action, dry_run=True)
    # Then it answers what it would do, and not one write reached the API server
    assert result["dry_run"] is True
    assert result["outcome"] in ("dry-run", "ignored", "duplicate"), result["reason"]
    assert writes(world) == []
    assert world.node(NODE)["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert len(result["plan"]) == 7


def test_dry_run_drain_reports_the_cordon_and_checkpoints_it_would_make(world: World) -> None:
    spot_node(world.sim)
    world.sim.clear_requests()
    result = runbook(world, action="drain", dry_run=True)
    assert result["outcome"] == "dry-run"
    assert types(result)[0] == "cordon"
    assert types(result).count("checkpoint-requested") == 3
    assert writes(world) == []
    assert world.node(NODE)["spec"].get("unschedulable") is not True


# --------------------------------------------------------------------------- for real


def test_drain_cordons_checkpoints_and_evicts_everything_but_daemonset_and_mirror_pods(world: World) -> None:
    # Given the sample node and the sample drain payload
    scenario = spot_node(world.sim)
    # When it runs
    request = parse_runbook(load_event("runbook-drain.json"))
    result = handle_runbook(request, runbook_deps(world.deps(), request)).to_json()
    # Then the node is cordoned with the manual taint, every trainer checkpointed before it went
    assert result["outcome"] == "handled", result["reason"]
    assert result["drain"]["outcome"] == "drained"
    node = world.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert TAINT in node["spec"]["taints"]
    notes = node["metadata"]["annotations"]
    assert notes["gpuwarden.io/kind"] == "manual"
    assert notes["gpuwarden.io/cordoned"] == "true"
    assert "gpuwarden.io/drain-started" in notes
    assert "gpuwarden.io/drain-completed" in notes
    acked = {a["pod"] for a in result["actions"] if a["type"] == "evict" and a["reason"] == "checkpoint acknowledged"}
    assert acked == set(scenario.trainers.values())
    for key in [*scenario.trainers.values(), *scenario.inference]:
        assert world.pod(key) is None, key
    assert world.pod(scenario.daemonset_pod) is not None
    assert world.pod(scenario.mirror_pod) is not None
    # and the ledger says who asked and why
    (entry,) = [e for e in world.ledger.entries.values() if e.get("action") == "drain"]
    assert entry["caller"] == "test"
    assert entry["reason"].startswith("INC-4711")
    assert entry["outcome"] == "handled"


def test_cordon_then_uncordon_gives_the_node_back_as_it_was(world: World) -> None:
    spot_node(world.sim)
    original = world.node(NODE)
    cordoned = runbook(world, action="cordon", reason="suspect GPU")
    assert cordoned["outcome"] == "handled", cordoned["reason"]
    assert world.node(NODE)["spec"]["unschedulable"] is True
    released = runbook(world, action="uncordon")
    assert released["outcome"] == "handled", released["reason"]
    node = world.node(NODE)
    assert not node["spec"].get("unschedulable")
    assert node["spec"]["taints"] == original["spec"]["taints"]
    assert not [k for k in node["metadata"]["annotations"] if k.startswith("gpuwarden.io/")]


def test_uncordon_leaves_a_cordon_made_by_someone_else(world: World) -> None:
    # Given a node an operator cordoned with kubectl before gpuwarden held it
    spot_node(world.sim)
    world.sim.patch_direct("Node", NODE, {"spec": {"unschedulable": True}})
    assert runbook(world, action="cordon")["outcome"] == "handled"
    # When gpuwarden is asked to uncordon it
    result = runbook(world, action="uncordon")
    # Then its taint and annotations are gone, and the operator's cordon stays
    node = world.node(NODE)
    assert node["spec"]["unschedulable"] is True
    assert TAINT not in node["spec"]["taints"]
    assert not [k for k in node["metadata"]["annotations"] if k.startswith("gpuwarden.io/")]
    assert "someone else cordoned it" in result["reason"]


def test_uncordon_refuses_a_node_held_for_a_spot_interruption_unless_forced(world: World) -> None:
    spot_node(world.sim)
    world.sim.patch_direct(
        "Node",
        NODE,
        {
            "metadata": {"annotations": {"gpuwarden.io/kind": "spot-interruption", "gpuwarden.io/event-id": "e-1"}},
            "spec": {"unschedulable": True},
        },
    )
    result = runbook(world, action="uncordon")
    assert result["outcome"] == "ignored"
    assert "spot-interruption" in result["reason"]
    assert world.node(NODE)["spec"]["unschedulable"] is True


def test_checkpoint_only_asks_and_evicts_nothing(world: World) -> None:
    scenario = spot_node(world.sim)
    result = runbook(world, action="checkpoint")
    assert result["outcome"] == "handled", result["reason"]
    assert types(result).count("checkpoint-requested") == 3
    assert "evict" not in types(result)
    assert "cordon" not in types(result)
    assert not world.node(NODE)["spec"].get("unschedulable")
    for key in [*scenario.trainers.values(), *scenario.inference]:
        assert world.pod(key) is not None, key


def test_replace_launches_one_nodeclaim_and_never_a_second(world: World) -> None:
    spot_node(world.sim)
    first = runbook(world, action="replace")
    assert first["outcome"] == "handled", first["reason"]
    second = runbook(world, action="replace")
    assert second["outcome"] == "ignored"
    assert len(world.sim.list("NodeClaim")) == 1
    assert not world.node(NODE)["spec"].get("unschedulable")


# --------------------------------------------------------------------------- guardrails


def test_a_window_that_freezes_disruption_refuses_a_drain_and_names_itself(world: World) -> None:
    spot_node(world.sim)
    result = runbook(world, frozen_policy(), action="drain")
    assert result["outcome"] == "ignored"
    assert "change-freeze" in result["reason"]
    assert not world.node(NODE)["spec"].get("unschedulable")


def test_force_overrides_do_not_disrupt_but_never_a_pdb(world: World) -> None:
    # Given a trainer that says do-not-disrupt, inference pods behind a PDB that allows nothing,
    # a frozen window, and a voluntary drain limit of 60 s
    scenario = spot_node(world.sim, modes=("annotate",), pdb_min_available="100%", grace=2)
    trainer = scenario.trainers["annotate"]
    world.sim.patch_direct(
        "Pod", trainer.split("/")[1], {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}, "ml"
    )
    policy = frozen_policy(voluntary_limit_seconds=60)
    # When a drain is asked without force
    refused = runbook(world, policy, action="drain")
    # Then the window refuses it, by name (contract §4: a window's refusal is the reason, whatever
    # else — do-not-disrupt here — would also refuse), and nothing changes
    assert refused["outcome"] == "ignored"
    assert "change-freeze" in refused["reason"]
    assert not world.node(NODE)["spec"].get("unschedulable")
    # When it is forced
    forced = runbook(world, policy, action="drain", force=True)
    # Then the trainer goes, the PDB-guarded pods stay, and the drain says why it stopped
    assert forced["outcome"] == "failed"
    assert "PDB" in forced["reason"] or "disruption budget" in forced["reason"]
    assert world.pod(trainer) is None
    assert all(world.pod(key) is not None for key in scenario.inference)
    assert "delete" not in types(forced)


def test_status_shows_the_pdb_that_blocks_a_pod_and_the_pods_waiting_on_a_checkpoint(world: World) -> None:
    # Given inference pods behind a PDB that allows nothing, and a trainer that never acks
    scenario = spot_node(world.sim, modes=("annotate",), pdb_min_available="100%")
    world.workloads.silent.add(scenario.trainers["annotate"])
    runbook(world, action="checkpoint")
    world.sim.clear_requests()
    # When status is asked
    result = runbook(world, action="status")
    # Then it names the PDB for each blocked pod and the pod waiting on its checkpoint
    status = result["status"]
    blocked = {b["pod"]: b["pdb"] for b in status["blocked_by_pdb"]}
    assert blocked == dict.fromkeys(scenario.inference, "serving/inference")
    assert [w["pod"] for w in status["waiting_for_checkpoint"]] == [scenario.trainers["annotate"]]
    assert writes(world) == []


def test_status_shows_the_ledger_of_the_nodes_event(world: World) -> None:
    spot_node(world.sim)
    cordon = runbook(world, action="cordon", reason="bad NVLink")
    status = runbook(world, action="status")["status"]
    assert status["event"]["id"] == cordon["event_id"]
    assert status["event"]["kind"] == "manual"
    assert status["cordoned_by_gpuwarden"] is True
    assert status["ledger"]["reason"] == "bad NVLink"
    assert status["ledger"]["caller"] == "test"


def test_an_instance_that_is_not_a_node_of_the_cluster_fails_naming_it(world: World) -> None:
    # Given a cluster without that instance / When a drain is asked for it
    spot_node(world.sim)
    result = runbook(world, action="drain", instance_id="i-0123456789abcdef0")
    # Then it failed (a script must not read a typo as success), naming what was not found
    assert result["outcome"] == "failed"
    assert "i-0123456789abcdef0 is not a node of cluster ml-prod" in result["reason"]
    assert result["plan"] == []


def test_a_drain_can_target_the_node_by_instance_id(world: World) -> None:
    spot_node(world.sim, modes=(), inference=0, pdb_min_available=None)
    result = runbook(world, action="cordon", instance_id=INSTANCE)
    assert result["node"] == NODE
    assert result["outcome"] == "handled"


# --------------------------------------------------------------------------- bad payloads


BAD = [
    ({"action": "reboot", "node": NODE}, "action"),
    ({"action": "drain", "node": NODE, "instance_id": INSTANCE}, "exactly one of 'node' or 'instance_id'"),
    ({"action": "drain"}, "exactly one of 'node' or 'instance_id'"),
    ({"action": "drain", "node": "Not_A_Node!"}, "node"),
    ({"action": "drain", "instance_id": "i-xyz"}, "instance_id"),
    ({"action": "drain", "node": NODE, "grace": 0}, "grace"),
    ({"action": "drain", "node": NODE, "force": "yes"}, "force"),
]


@pytest.mark.parametrize(("payload", "named"), BAD)
def test_the_function_answers_a_bad_payload_with_the_field_named(payload: dict[str, Any], named: str) -> None:
    from gpuwarden.handlers.runbook import handler

    answer = handler(payload, lambda_context())
    assert answer["outcome"] == "invalid"
    assert answer["status"] == 400
    assert named in answer["error"]
    assert answer["errors"]


@pytest.mark.parametrize(("payload", "named"), BAD[1:])
def test_the_cli_rejects_a_bad_payload_with_exit_2_and_the_field_on_stderr(
    tmp_path: Any, payload: dict[str, Any], named: str
) -> None:
    from gpuwarden.cli import main

    path = tmp_path / "bad.json"
    path.write_text(json.dumps(payload))
    result = CliRunner().invoke(main, ["invoke", str(path)])
    assert result.exit_code == 2
    assert named in result.stderr


def test_the_cli_refuses_an_unknown_action_and_both_targets() -> None:
    from gpuwarden.cli import main

    unknown = CliRunner().invoke(main, ["runbook", "reboot", "--node", NODE])
    assert unknown.exit_code == 2
    assert "ACTION" in unknown.stderr
    both = CliRunner().invoke(main, ["runbook", "drain", "--node", NODE, "--instance-id", INSTANCE])
    assert both.exit_code == 2
    assert "exactly one of 'node' or 'instance_id'" in both.stderr


# --------------------------------------------------------------------------- entry points


def lambda_context(**extra: Any) -> Any:
    return SimpleNamespace(
        function_name="gpuwarden-runbook",
        memory_limit_in_mb=256,
        invoked_function_arn="arn:aws:lambda:us-west-2:123456789012:function:gpuwarden-runbook",
        aws_request_id="r-1",
        **extra,
    )


def test_the_deployed_handler_records_the_caller_from_the_client_context(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuwarden.handlers import _runtime
    from gpuwarden.handlers.runbook import handler

    spot_node(world.sim)
    monkeypatch.setenv("KUBECONFIG", str(world.sim.kubeconfig_path))
    monkeypatch.setenv("GPUWARDEN_CLUSTER", "ml-prod")
    _runtime.settings.cache_clear()
    _runtime.deps.cache_clear()
    try:
        context = lambda_context(
            client_context=SimpleNamespace(custom={"caller": "arn:aws:iam::123456789012:user/alice"})
        )
        answer = handler({"action": "status", "node": NODE}, context)
        entries = _runtime.deps().ledger.entries.values()  # type: ignore[attr-defined]
    finally:
        _runtime.settings.cache_clear()
        _runtime.deps.cache_clear()
    assert answer["outcome"] == "handled"
    assert answer["action"] == "status"
    assert answer["dry_run"] is True
    assert {"action", "node", "dry_run", "outcome", "reason", "plan", "actions"} <= set(answer)
    assert [e["caller"] for e in entries] == ["arn:aws:iam::123456789012:user/alice"]


def test_invoke_routes_a_runbook_payload_to_the_runbook_service(
    world: World, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    from gpuwarden.cli import main

    spot_node(world.sim)
    monkeypatch.setenv("KUBECONFIG", str(world.sim.kubeconfig_path))
    monkeypatch.setenv("GPUWARDEN_CLUSTER", "ml-prod")
    world.sim.clear_requests()
    result = CliRunner().invoke(main, ["invoke", str(load_event.__globals__["EVENTS"] / "runbook-plan.json")])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert (answer["action"], answer["node"], answer["outcome"]) == ("plan", NODE, "dry-run")
    assert len(answer["plan"]) == 7
    assert writes(world) == []


def test_client_context_roundtrip_is_what_the_cli_sends() -> None:
    from gpuwarden.handlers.runbook import caller_of

    sent = base64.b64encode(json.dumps({"custom": {"caller": "arn:aws:sts::1:assumed-role/oncall/bob"}}).encode())
    custom = json.loads(base64.b64decode(sent))["custom"]
    assert caller_of(SimpleNamespace(client_context=SimpleNamespace(custom=custom))) == (
        "arn:aws:sts::1:assumed-role/oncall/bob"
    )
    assert caller_of(SimpleNamespace(invoked_function_arn="arn:aws:lambda:us-west-2:1:function:rb")).startswith(
        "invoke:arn:aws:lambda"
    )
