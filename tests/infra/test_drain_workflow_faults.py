"""The drain workflow's Retry / Catch: which failures it retries, how, and where the rest end."""

from __future__ import annotations

import json
from typing import Any

from gpuwarden.domain.drain_faults import RETRY
from tests.infra.conftest import Synth

TRANSIENT_NAMES = {"DrainClusterUnreachable", "DrainApiRetriesExhausted", "DrainConflictsExhausted"}


def _definition(synth: Synth) -> dict[str, Any]:
    (sm,) = synth.resources("AWS::StepFunctions::StateMachine").values()
    parts = sm["Properties"]["DefinitionString"]["Fn::Join"][1]
    text = "".join(p if isinstance(p, str) else '"ARN"' for p in parts).replace('""ARN""', '"ARN"')
    definition: dict[str, Any] = json.loads(text)
    return definition


def test_drain_round_faults_are_retried_with_capped_jittered_backoff(synth: Synth) -> None:
    # Given the synthesized drain workflow
    definition = _definition(synth)
    step = definition["States"][definition["StartAt"]]
    # Then one Retry rule covers exactly the three transient fault names, with the shared numbers
    (rule,) = [r for r in step["Retry"] if TRANSIENT_NAMES & set(r["ErrorEquals"])]
    assert set(rule["ErrorEquals"]) == TRANSIENT_NAMES
    assert rule["IntervalSeconds"] == RETRY.interval_seconds == 1
    assert rule["BackoffRate"] == RETRY.backoff_rate
    assert rule["MaxDelaySeconds"] == RETRY.max_delay_seconds
    assert rule["JitterStrategy"] == "FULL"
    # enough attempts to retry for the whole 6 h execution: the function, not this count, says when to stop
    assert rule["MaxAttempts"] * RETRY.max_delay_seconds >= definition["TimeoutSeconds"]


def test_the_function_passes_its_retry_count_so_it_can_bound_voluntary_retries(synth: Synth) -> None:
    definition = _definition(synth)
    step = definition["States"][definition["StartAt"]]
    assert step["Parameters"] == {"state.$": "$", "retry_count.$": "$$.State.RetryCount"}


def test_a_drain_given_up_ends_in_not_drained_with_what_is_left_and_other_errors_fail_at_once(synth: Synth) -> None:
    definition = _definition(synth)
    states = definition["States"]
    step = states[definition["StartAt"]]
    # Then only DrainGaveUp is caught: it goes to a Fail state whose cause is the function's message
    (catch,) = step["Catch"]
    assert catch["ErrorEquals"] == ["DrainGaveUp"]
    assert catch["ResultPath"] == "$.error"  # the last state stays in the execution's output beside it
    end = states[catch["Next"]]
    assert end == {
        "Type": "Fail",
        "Comment": end["Comment"],
        "Error": "DrainNotFinished",
        "CausePath": "$.error.Cause",
    }
    # and nothing catches everything: an error retrying cannot fix fails the execution at once
    retried = {e for r in step["Retry"] for e in r["ErrorEquals"]}
    assert "States.ALL" not in retried
    assert "States.ALL" not in {e for c in step["Catch"] for e in c["ErrorEquals"]}
    assert "DrainGaveUp" not in retried
