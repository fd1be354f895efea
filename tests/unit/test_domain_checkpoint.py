"""Parsing the `gpuwarden.io/checkpoint` annotations a workload's owner writes (docs/cluster.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import (
    MAX_TIMEOUT_SECONDS,
    BadCheckpoint,
    CheckpointSpec,
    checkpoint_by,
    checkpoint_spec,
)
from gpuwarden.domain.views import PodView

NOW = datetime(2026, 6, 1, 14, 2, 10, tzinfo=UTC)


def pod(**annotations: str) -> PodView:
    return PodView("ml", "w", "u", "n1", "Running", containers=("trainer", "sidecar"), annotations=annotations)


def spec(value: str, **extra: str) -> CheckpointSpec | BadCheckpoint | None:
    return checkpoint_spec(pod(**{ann.CHECKPOINT: value, **extra}))


def test_pod_without_the_annotation_did_not_opt_in() -> None:
    assert checkpoint_spec(pod()) is None


@pytest.mark.parametrize(
    ("value", "signal", "command"),
    [
        ("signal:SIGUSR1", "SIGUSR1", ("kill", "-s", "USR1", "1")),
        ("signal:usr2", "SIGUSR2", ("kill", "-s", "USR2", "1")),
        ("signal: SIGTERM ", "SIGTERM", ("kill", "-s", "TERM", "1")),
    ],
)
def test_signal_mode_sends_that_signal_to_pid_1_of_the_first_container(
    value: str, signal: str, command: tuple[str, ...]
) -> None:
    parsed = spec(value)
    assert isinstance(parsed, CheckpointSpec)
    assert (parsed.mode, parsed.signal, parsed.container, parsed.timeout_seconds) == ("signal", signal, "trainer", 60)
    assert parsed.exec_command() == command


def test_exec_mode_with_shell_metacharacters_is_only_argv() -> None:
    # Given a command full of shell syntax
    parsed = spec("exec:/bin/ckpt --out '/data/a b' ; rm -rf / && echo $HOME | tee x")
    # Then it is split like a shell would split words, and nothing is interpreted: no shell runs it
    assert isinstance(parsed, CheckpointSpec)
    assert parsed.exec_command() == (
        "/bin/ckpt",
        "--out",
        "/data/a b",
        ";",
        "rm",
        "-rf",
        "/",
        "&&",
        "echo",
        "$HOME",
        "|",
        "tee",
        "x",
    )
    assert parsed.exec_command()[0] not in ("sh", "/bin/sh", "bash")


def test_http_mode_takes_a_port_and_a_path() -> None:
    parsed = spec("http:8080/checkpoint/now")
    assert isinstance(parsed, CheckpointSpec)
    assert (parsed.mode, parsed.port, parsed.path) == ("http", 8080, "/checkpoint/now")
    bare = spec("http:9000")
    assert isinstance(bare, CheckpointSpec)
    assert bare.path == "/"


def test_annotate_mode_and_its_container_and_timeout() -> None:
    parsed = spec("annotate", **{ann.CHECKPOINT_TIMEOUT: "15"})
    assert isinstance(parsed, CheckpointSpec)
    assert (parsed.mode, parsed.timeout_seconds) == ("annotate", 15)


def test_checkpoint_container_annotation_picks_the_container() -> None:
    parsed = spec("signal:SIGUSR1", **{ann.CHECKPOINT_CONTAINER: "sidecar"})
    assert isinstance(parsed, CheckpointSpec)
    assert parsed.container == "sidecar"


@pytest.mark.parametrize(
    ("value", "extra", "why"),
    [
        ("carrier-pigeon", {}, "unknown checkpoint mode"),
        ("annotate:now", {}, "unknown checkpoint mode"),
        ("signal:SIGKILL", {}, "signal 'SIGKILL' is not one of"),
        ("signal:", {}, "is not one of"),
        ("exec:", {}, "exec: needs a command"),
        ("exec:/bin/ckpt 'unclosed", {}, "exec command does not parse"),
        ("http:99999/x", {}, "is not PORT/PATH"),
        ("http:/x", {}, "is not PORT/PATH"),
        ("signal:SIGUSR1", {ann.CHECKPOINT_CONTAINER: "ghost"}, "checkpoint container 'ghost' is not a container"),
        ("exec:/bin/ckpt", {ann.CHECKPOINT_CONTAINER: "ghost"}, "is not a container of this pod"),
        ("annotate", {ann.CHECKPOINT_TIMEOUT: "soon"}, "is not a whole number of seconds"),
        ("annotate", {ann.CHECKPOINT_TIMEOUT: "-5"}, "is not a whole number of seconds"),
    ],
)
def test_bad_annotations_are_refused_with_a_reason(value: str, extra: dict[str, str], why: str) -> None:
    parsed = spec(value, **extra)
    assert isinstance(parsed, BadCheckpoint)
    assert why in parsed.reason


def test_exec_and_signal_are_refused_when_the_policy_turns_exec_off() -> None:
    parsed = checkpoint_spec(pod(**{ann.CHECKPOINT: "signal:SIGUSR1"}), allow_exec=False)
    assert isinstance(parsed, BadCheckpoint)
    assert "pods/exec" in parsed.reason
    assert isinstance(checkpoint_spec(pod(**{ann.CHECKPOINT: "annotate"}), allow_exec=False), CheckpointSpec)


def test_http_and_annotate_do_not_need_the_container_to_exist() -> None:
    parsed = spec("annotate", **{ann.CHECKPOINT_CONTAINER: "ghost"})
    assert isinstance(parsed, CheckpointSpec)


def test_timeout_is_capped_and_cut_to_the_deadline() -> None:
    # Given a pod asking for a day
    parsed = spec("annotate", **{ann.CHECKPOINT_TIMEOUT: "86400"})
    assert isinstance(parsed, CheckpointSpec)
    assert parsed.timeout_seconds == MAX_TIMEOUT_SECONDS
    # Then its checkpoint deadline is never later than the event's
    deadline = NOW + timedelta(seconds=120)
    assert checkpoint_by(NOW, parsed.timeout_seconds, deadline) == deadline
    assert checkpoint_by(NOW, 30, deadline) == NOW + timedelta(seconds=30)
    assert checkpoint_by(NOW, 30, None) == NOW + timedelta(seconds=30)


@given(value=st.text(max_size=60), container=st.one_of(st.none(), st.text(max_size=10)))
def test_any_annotation_parses_to_a_spec_or_a_reason_never_an_error(value: str, container: str | None) -> None:
    extra = {ann.CHECKPOINT_CONTAINER: container} if container is not None else {}
    parsed = spec(value, **extra)
    assert isinstance(parsed, CheckpointSpec | BadCheckpoint)
    if isinstance(parsed, CheckpointSpec):
        assert 0 < parsed.timeout_seconds <= MAX_TIMEOUT_SECONDS
        if parsed.mode in ("signal", "exec"):
            assert parsed.container in ("trainer", "sidecar")
            assert parsed.exec_command()


@given(timeout=st.text(max_size=8))
def test_any_timeout_annotation_parses_to_a_spec_or_a_reason_never_an_error(timeout: str) -> None:
    parsed = spec("annotate", **{ann.CHECKPOINT_TIMEOUT: timeout})
    assert isinstance(parsed, CheckpointSpec | BadCheckpoint)
    if isinstance(parsed, CheckpointSpec):
        assert 0 <= parsed.timeout_seconds <= MAX_TIMEOUT_SECONDS


def test_unicode_digits_are_not_a_timeout() -> None:
    parsed = spec("annotate", **{ann.CHECKPOINT_TIMEOUT: "²"})
    assert isinstance(parsed, BadCheckpoint)
