"""Lambda's own retries of each asynchronously invoked function, read back from the synthesized
template against the table in docs/deploy.md ("Lambda's own retries"), and the alarm on each
function's on-failure queue."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from infra.components.functions import SPECS
from tests.infra.conftest import Synth

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def _documented() -> dict[str, tuple[int, int]]:
    """The table's rows: function → (retry attempts, maximum event age in seconds)."""
    text = DEPLOY.read_text()
    table = text[text.index("## Lambda's own retries") :].split("\n## ", 1)[0]
    rows: dict[str, tuple[int, int]] = {}
    for line in table.splitlines():
        m = re.match(r"\| `(\w+)` \| [^|]+ \| (\d+) \| (\d+) (s|min|h) \|", line)
        if m:
            seconds = int(m[3]) * {"s": 1, "min": 60, "h": 3600}[m[4]]
            rows[m[1]] = (int(m[2]), seconds)
    return rows


def _function_id(synth: Synth, handler: str) -> str | None:
    ids = [k for k, v in synth.resources("AWS::Lambda::Function").items() if v["Properties"]["Handler"] == handler]
    assert len(ids) <= 1, ids
    return ids[0] if ids else None


def _config_of(synth: Synth, function_id: str) -> dict[str, Any] | None:
    configs = [
        c["Properties"]
        for c in synth.resources("AWS::Lambda::EventInvokeConfig").values()
        if c["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    assert len(configs) <= 1, configs
    return configs[0] if configs else None


def test_the_documented_table_names_every_asynchronously_invoked_function() -> None:
    documented = _documented()
    assert set(documented) == {s.name for s in SPECS if s.invoked_async is not None}, documented
    # the one kind of input where a late retry is worse than none: one retry, inside the 120 s notice
    assert documented["Interruption"] == (1, 120)


def test_each_functions_async_invoke_config_is_the_documented_one_with_an_alarmed_failure_queue(
    synth: Synth,
) -> None:
    documented = _documented()
    alarms = list(synth.resources("AWS::CloudWatch::Alarm").values())
    seen = 0
    for spec in SPECS:
        function_id = _function_id(synth, spec.handler)
        if function_id is None:
            continue  # switched off in this synth's policy: nothing created
        config = _config_of(synth, function_id)
        if spec.invoked_async is None:
            assert config is None, (spec.name, config)
            continue
        seen += 1
        assert config is not None, spec.name
        retries, age = documented[spec.name]
        assert config["MaximumRetryAttempts"] == retries, (spec.name, config)
        assert config["MaximumEventAgeInSeconds"] == age, (spec.name, config)
        destination = config["DestinationConfig"]["OnFailure"]["Destination"]
        queue_id = destination["Fn::GetAtt"][0]
        assert synth.resources("AWS::SQS::Queue").get(queue_id) is not None, (spec.name, destination)
        # the queue's alarm: fires on the first message that lands there
        on_queue = [
            a["Properties"]
            for a in alarms
            if a["Properties"].get("MetricName") == "ApproximateNumberOfMessagesVisible"
            and {"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}
            in a["Properties"].get("Dimensions", [])
        ]
        assert len(on_queue) == 1, (spec.name, queue_id)
        (alarm,) = on_queue
        assert alarm["Threshold"] == 0, alarm
        assert alarm["ComparisonOperator"] == "GreaterThanThreshold", alarm
        assert alarm["EvaluationPeriods"] == 1, alarm
    assert seen >= 3, "the synth should hold the interruption, planning and scheduled functions at least"
