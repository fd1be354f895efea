"""Budget-window schedules: the cron translation (pure) and the synthesized Scheduler resources."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.domain.windows import Window
from gpuwarden.kinds.inputs import parse_scheduler_tick
from infra.app import STACK_NAME, build_app
from infra.components.schedules import close_expression, open_expressions, schedule_name
from infra.config import SKIP_BUNDLING

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

WINDOWS_HANDLER = "gpuwarden.handlers.scheduled.handler"
MAINTENANCE_HANDLER = "gpuwarden.handlers.planning.handler"
FREEZE: dict[str, Any] = {
    "name": "business-hours-freeze",
    "schedule": "0 9 * * MON-FRI",
    "timezone": "Asia/Seoul",
    "duration": "10h",
    "max_disruptions": 0,
    "nodepools": ["gpu-training"],
}
NIGHT: dict[str, Any] = {
    "name": "night-cap",
    "schedule": "0 22 * * *",
    "timezone": "UTC",
    "duration": "8h",
    "max_disruptions": 2,
    "gpu_limit": 8,
}
ODD_MONDAYS: dict[str, Any] = {
    "name": "odd-mondays",
    "schedule": "0 0 */2 * MON",
    "timezone": "UTC",
    "duration": "1h",
    "max_disruptions": 1,
}


def window(schedule: str, duration: str = "1h", timezone: str = "UTC") -> Window:
    return Window.model_validate(
        {"name": "w", "schedule": schedule, "timezone": timezone, "duration": duration, "max_disruptions": 1}
    )


# --------------------------------------------------------------------------- cron translation


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ("0 9 * * MON-FRI", ["cron(0 9 ? * 2-6 *)"]),
        ("0 22 * * *", ["cron(0 22 * * ? *)"]),
        ("30 2 1 * *", ["cron(30 2 1 * ? *)"]),
        ("0 0 * * 0", ["cron(0 0 ? * 1 *)"]),  # Sunday is 0 in cron, 1 in Scheduler
        ("0 0 * * 7", ["cron(0 0 ? * 1 *)"]),
        ("0 0 * * SAT,SUN", ["cron(0 0 ? * 1,7 *)"]),
        ("*/15 8-10 * JAN-MAR *", ["cron(0,15,30,45 8-10 * 1-3 ? *)"]),
        ("0 0 13 * FRI", ["cron(0 0 13 * ? *)", "cron(0 0 ? * 6 *)"]),  # either day matches: two schedules
        ("0 0 */2 * MON", []),  # both must match through a step: no Scheduler form
        ("@daily", ["cron(0 0 * * ? *)"]),
    ],
)
def test_open_schedule_in_schedulers_six_field_cron(schedule: str, expected: list[str]) -> None:
    assert open_expressions(window(schedule)) == expected


@pytest.mark.parametrize(
    ("schedule", "duration", "expected"),
    [
        ("0 9 * * MON-FRI", "10h", "cron(0 19 ? * 2-6 *)"),  # same day
        ("0 22 * * *", "8h", "cron(0 6 * * ? *)"),  # next day, every day
        ("0 20 * * FRI", "10h", "cron(0 6 ? * 7 *)"),  # Friday night closes Saturday
        ("0 22 * * SAT", "26h", "cron(0 0 ? * 2 *)"),  # Saturday 22:00 + 26 h = Monday 00:00
        ("30 23 * * *", "45m", "cron(15 0 * * ? *)"),
        ("0 22 1 * *", "8h", None),  # the 1st + 1 day crosses month ends
        ("*/30 9 * * *", "1h", None),  # several open minutes
        ("0 0 13 * FRI", "1h", None),  # two open schedules
        ("0 22 * 6 *", "8h", None),  # June 30 closes on July 1
    ],
)
def test_close_schedule_when_expressible(schedule: str, duration: str, expected: str | None) -> None:
    assert close_expression(window(schedule, duration)) == expected


def test_schedule_names_fit_schedulers_64_characters_and_stay_unique() -> None:
    long_a, long_b = "a" * 60 + "-one", "a" * 60 + "-two"
    assert schedule_name("night-cap", "open") == "night-cap-open"
    assert len(schedule_name(long_a, "open-dow")) <= 64
    assert schedule_name(long_a, "close") != schedule_name(long_b, "close")


# --------------------------------------------------------------------------- the synthesized stack


def _gpu_scan(schedule: dict[str, Any]) -> bool:
    return str(schedule["Properties"].get("Name", "")).endswith("-gpu-health-scan")


class Synthesized:
    def __init__(self, outdir: Path, error: Exception | None) -> None:
        self.template: dict[str, Any] = json.loads((outdir / f"{STACK_NAME}.template.json").read_text())
        report = outdir / "validation-report.json"
        self.report: dict[str, Any] = json.loads(report.read_text()) if report.exists() else {}
        self.error = error

    def resources(self, type_: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.template["Resources"].items() if v["Type"] == type_}

    def function_id(self, handler: str) -> str:
        (found,) = [
            k for k, v in self.resources("AWS::Lambda::Function").items() if v["Properties"]["Handler"] == handler
        ]
        return found

    def schedules(self) -> dict[str, dict[str, Any]]:
        """The budget-window schedules (the GPU-health scan's is tests/infra/test_gpu_signals_infra.py's)."""
        found = self.resources("AWS::Scheduler::Schedule").values()
        return {v["Properties"]["Name"]: v["Properties"] for v in found if not _gpu_scan(v)}

    def statements(self, role_id: str) -> list[dict[str, Any]]:
        return [
            statement
            for policy in self.resources("AWS::IAM::Policy").values()
            if {"Ref": role_id} in policy["Properties"]["Roles"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        ]

    def scheduler_role(self) -> str:
        (found,) = [
            k
            for k, v in self.resources("AWS::IAM::Role").items()
            if "scheduler.amazonaws.com" in json.dumps(v) and "GPU-health" not in json.dumps(v)
        ]
        return found

    def role_of(self, handler: str) -> str:
        props = self.template["Resources"][self.function_id(handler)]["Properties"]
        role: str = props["Role"]["Fn::GetAtt"][0]
        return role


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    outdir = tmp_path_factory.mktemp("cdk.out.schedules")
    policy = {"cluster": "ml-test", "windows": [FREEZE, NIGHT, ODD_MONDAYS]}
    app = build_app(outdir=str(outdir), context={"cluster": "ml-test", SKIP_BUNDLING: True, "policy": policy})
    error: Exception | None = None
    try:
        app.synth()
    except RuntimeError as exc:  # cdk-nag findings fail the synth through the validation plugin
        error = exc
    return Synthesized(outdir, error)


def test_each_window_opens_and_closes_in_its_own_time_zone(synth: Synthesized) -> None:
    schedules = synth.schedules()
    expected = {
        "business-hours-freeze-open": ("cron(0 9 ? * 2-6 *)", "Asia/Seoul"),
        "business-hours-freeze-close": ("cron(0 19 ? * 2-6 *)", "Asia/Seoul"),
        "night-cap-open": ("cron(0 22 * * ? *)", "UTC"),
        "night-cap-close": ("cron(0 6 * * ? *)", "UTC"),
    }
    for name, (expression, zone) in expected.items():
        assert schedules[name]["ScheduleExpression"] == expression, name
        assert schedules[name]["ScheduleExpressionTimezone"] == zone, name
    assert schedules["reconcile"]["ScheduleExpression"] == "rate(5 minutes)"
    # a window with no Scheduler form gets no schedule of its own: the reconcile covers it
    assert set(schedules) == {*expected, "reconcile"}


def test_every_schedule_invokes_the_windows_function_with_a_window_tick(synth: Synthesized) -> None:
    windows_fn = synth.function_id(WINDOWS_HANDLER)
    role_id = synth.scheduler_role()
    for name, props in synth.schedules().items():
        target = props["Target"]
        assert target["Arn"] == {"Fn::GetAtt": [windows_fn, "Arn"]}, name
        assert target["RoleArn"] == {"Fn::GetAtt": [role_id, "Arn"]}, name
        assert target["RetryPolicy"] == {"MaximumRetryAttempts": 5, "MaximumEventAgeInSeconds": 3600}, name
        dlq = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
        assert synth.template["Resources"][dlq]["Type"] == "AWS::SQS::Queue"
        assert props["FlexibleTimeWindow"] == {"Mode": "OFF"}
        tick = json.loads(target["Input"])
        assert tick["scheduled_time"] == "<aws.scheduler.scheduled-time>"
        parsed = parse_scheduler_tick(tick)  # the input parses as the handler will parse it
        action = name.rsplit("-", 1)[-1]
        assert parsed.action == action
        if action != "reconcile":
            assert name == f"{parsed.window}-{action}"
    group = synth.resources("AWS::Scheduler::ScheduleGroup")
    assert all(p["GroupName"] == {"Ref": next(iter(group))} for p in synth.schedules().values())


def test_scheduler_role_may_only_invoke_the_windows_function(synth: Synthesized) -> None:
    role_id = synth.scheduler_role()
    role = synth.template["Resources"][role_id]
    assume = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert assume["Principal"] == {"Service": "scheduler.amazonaws.com"}
    assert assume["Condition"] == {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
    statements = synth.statements(role_id)
    invoke = [s for s in statements if s["Action"] == "lambda:InvokeFunction"]
    assert invoke == [
        {
            "Action": "lambda:InvokeFunction",
            "Effect": "Allow",
            "Resource": {"Fn::GetAtt": [synth.function_id(WINDOWS_HANDLER), "Arn"]},
        }
    ]
    others = {
        a
        for s in statements
        if s is not invoke[0]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert all(a.startswith("sqs:") for a in others)  # the dead-letter queue only


@pytest.mark.parametrize("handler", [WINDOWS_HANDLER, MAINTENANCE_HANDLER])
def test_planners_create_schedules_only_in_the_group_and_pass_only_the_scheduler_role(
    synth: Synthesized, handler: str
) -> None:
    statements = {s.get("Sid"): s for s in synth.statements(synth.role_of(handler))}
    create = statements["MaintenanceSchedules"]
    assert sorted(create["Action"]) == ["scheduler:CreateSchedule", "scheduler:GetSchedule"]
    (group_id,) = synth.resources("AWS::Scheduler::ScheduleGroup")
    assert {"Ref": group_id} in create["Resource"]["Fn::Join"][1]
    assert json.dumps(create["Resource"]).endswith('"/*"]]}')
    passing = statements["PassSchedulerRole"]
    assert passing["Action"] == "iam:PassRole"
    assert passing["Condition"] == {"StringEquals": {"iam:PassedToService": "scheduler.amazonaws.com"}}
    assert passing["Resource"]["Fn::GetAtt"][0] in synth.resources("AWS::IAM::Role")
    env = synth.template["Resources"][synth.function_id(handler)]["Properties"]["Environment"]["Variables"]
    assert env["GPUWARDEN_SCHEDULE_GROUP"] == {"Ref": group_id}
    dlq = env["GPUWARDEN_SCHEDULER_DLQ_ARN"]["Fn::GetAtt"][0]
    assert synth.template["Resources"][dlq]["Type"] == "AWS::SQS::Queue"
    assert "GPUWARDEN_DRAIN_STATE_MACHINE_ARN" in env
    if handler == MAINTENANCE_HANDLER:
        assert env["GPUWARDEN_WINDOWS_FUNCTION_ARN"] == {"Fn::GetAtt": [synth.function_id(WINDOWS_HANDLER), "Arn"]}


def test_aws_health_scheduled_changes_reach_the_maintenance_function(synth: Synthesized) -> None:
    rules = [
        r["Properties"]
        for r in synth.resources("AWS::Events::Rule").values()
        if r["Properties"]["EventPattern"].get("source") == ["aws.health"]
    ]
    (rule,) = rules
    assert rule["EventPattern"] == {
        "source": ["aws.health"],
        "detail-type": ["AWS Health Event"],
        "detail": {"service": ["EC2"], "eventTypeCategory": ["scheduledChange"]},
    }
    (target,) = rule["Targets"]
    assert target["Arn"] == {"Fn::GetAtt": [synth.function_id(MAINTENANCE_HANDLER), "Arn"]}
    assert target["RetryPolicy"] == {"MaximumRetryAttempts": 2, "MaximumEventAgeInSeconds": 3600}


def test_cdk_nag_clean_with_windows(synth: Synthesized) -> None:
    unacknowledged = [
        v["ruleName"] for plugin in synth.report.get("pluginReports", []) for v in plugin.get("violations", [])
    ]
    assert not unacknowledged
    assert synth.error is None, str(synth.error)
