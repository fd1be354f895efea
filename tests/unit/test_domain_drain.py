"""The pure drain decisions: which pod gets what in one round, and the deadline rules."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.checkpoint import SHARE_SECONDS
from gpuwarden.domain.drain import (
    MIN_GRACE_SECONDS,
    STOP_MARGIN_SECONDS,
    DrainContext,
    decide_pod,
    decide_round,
    grace_for,
    hold_until,
    leave_order,
    must_delete,
    on_eviction_blocked,
)
from gpuwarden.domain.views import MIRROR_ANNOTATION, PodView

NOW = datetime(2026, 6, 1, 14, 2, 10, tzinfo=UTC)
EVENT = "evt-1"


def pod(name: str = "p", *, grace: int = 30, **fields: object) -> PodView:
    base: dict[str, object] = {
        "namespace": "ml",
        "name": name,
        "uid": name,
        "node_name": "n1",
        "phase": "Running",
        "containers": ("main",),
        "grace_seconds": grace,
    }
    return PodView(**{**base, **fields})  # type: ignore[arg-type]


def spot(now: datetime = NOW, left: float = 120.0) -> DrainContext:
    return DrainContext(event_id=EVENT, involuntary=True, deadline=NOW + timedelta(seconds=left), now=now)


def voluntary(now: datetime = NOW) -> DrainContext:
    return DrainContext(event_id=EVENT, involuntary=False, deadline=None, now=now)


def asked(by: datetime, **extra: str) -> dict[str, str]:
    return {
        ann.CHECKPOINT: "signal:SIGUSR1",
        ann.CHECKPOINT_EVENT: EVENT,
        ann.CHECKPOINT_REQUESTED: ann.rfc3339(by),
        **extra,
    }


def test_daemonset_mirror_and_finished_pods_are_skipped_with_a_reason() -> None:
    # Given a DaemonSet pod, a mirror pod and a finished pod
    pods = [
        pod("ds", owner_kind="DaemonSet", owner_name="nvidia-device-plugin"),
        pod("mirror", annotations={MIRROR_ANNOTATION: "abc"}),
        pod("done", phase="Succeeded"),
    ]
    # When a round is decided
    steps = decide_round(pods, spot())
    # Then each is skipped and says why: nothing is left to wait for
    assert [(s.step, s.reason) for s in steps] == [
        ("skip", "DaemonSet pod (nvidia-device-plugin)"),
        ("skip", "mirror (static) pod"),
        ("skip", "finished pod (Succeeded)"),
    ]
    assert all(s.step == "skip" for s in steps)


def test_pod_without_a_handshake_is_evicted_at_once_with_its_own_grace() -> None:
    step = decide_pod(pod("web"), spot())
    assert (step.step, step.reason, step.grace_seconds) == ("evict", "no checkpoint handshake", None)


def test_opted_in_pod_is_signalled_then_waits_then_evicted_on_ack() -> None:
    # Given an opted-in pod: not yet asked, asked and waiting, asked and acknowledged
    fresh = pod(annotations={ann.CHECKPOINT: "signal:SIGUSR1"})
    waiting = pod(annotations=asked(NOW + timedelta(seconds=30)))
    acked = pod(annotations=asked(NOW + timedelta(seconds=30), **{ann.CHECKPOINT_DONE: ann.rfc3339(NOW)}))
    # Then: signal, wait, evict
    assert decide_pod(fresh, spot()).step == "signal"
    assert decide_pod(waiting, spot()).step == "wait"
    assert decide_pod(acked, spot()).reason == "checkpoint acknowledged"


def test_ack_from_an_old_event_does_not_count_for_this_one() -> None:
    # Given a pod that acknowledged a checkpoint another event asked for long ago (past SHARE_SECONDS)
    long_ago = NOW - timedelta(seconds=SHARE_SECONDS + 1)
    annotations = asked(long_ago, **{ann.CHECKPOINT_EVENT: "older", ann.CHECKPOINT_DONE: ann.rfc3339(long_ago)})
    # Then it is asked again
    assert decide_pod(pod(annotations=annotations), spot()).step == "signal"


def test_ack_of_a_request_another_notice_just_made_counts_for_this_one() -> None:
    # Given a pod its gang's other notice asked moments ago, which acknowledged (docs/training-jobs.md)
    annotations = asked(NOW, **{ann.CHECKPOINT_EVENT: "other-node", ann.CHECKPOINT_DONE: ann.rfc3339(NOW)})
    # Then this notice does not ask again: the checkpoint is there, the pod may go
    step = decide_pod(pod(annotations=annotations), spot())
    assert (step.step, step.reason) == ("evict", "checkpoint acknowledged")


def test_request_in_flight_for_another_notice_is_waited_for_not_repeated() -> None:
    # Given a pod asked by another notice, not answered yet, its time still ahead
    annotations = asked(NOW + timedelta(seconds=30), **{ann.CHECKPOINT_EVENT: "other-node"})
    # Then this notice waits for the same acknowledgement
    assert decide_pod(pod(annotations=annotations), spot()).step == "wait"


def test_pod_that_does_not_acknowledge_is_evicted_when_its_time_is_up() -> None:
    p = pod(annotations=asked(NOW - timedelta(seconds=1)))
    assert decide_pod(p, spot()).reason == "checkpoint timed out"


def test_failed_delivery_evicts_at_once() -> None:
    p = pod(annotations=asked(NOW + timedelta(seconds=50), **{ann.CHECKPOINT_FAILED: "exit 1"}))
    step = decide_pod(p, spot())
    assert (step.step, step.reason) == ("evict", "checkpoint failed: exit 1")


def test_bad_checkpoint_annotation_is_evicted_without_a_handshake() -> None:
    step = decide_pod(pod(annotations={ann.CHECKPOINT: "carrier-pigeon"}), spot())
    assert step.step == "evict"
    assert step.reason.startswith("no checkpoint: unknown checkpoint mode")


def test_deadline_already_passed_evicts_instead_of_asking() -> None:
    step = decide_pod(pod(annotations={ann.CHECKPOINT: "annotate"}), spot(left=-1))
    assert (step.step, step.reason) == ("evict", "deadline passed before a checkpoint could be asked")


def test_grace_is_cut_to_what_the_instance_has_left_minus_the_margin() -> None:
    # Given 20 s left before a Spot deadline
    ctx = spot(left=20)
    # Then a pod asking for 30 s gets 18 s, one asking for 10 s keeps its own
    assert grace_for(pod(grace=30), ctx) == 20 - STOP_MARGIN_SECONDS
    assert grace_for(pod(grace=10), ctx) is None
    # and a voluntary drain never cuts the grace
    assert grace_for(pod(grace=30), voluntary()) is None


def test_blocked_pod_waits_until_deadline_minus_grace_then_is_deleted() -> None:
    # Given a pod with 10 s grace whose eviction a PDB refuses
    p = pod(grace=10)
    # When 11 s are left: wait; when 10 s are left: delete with the grace that is left
    early = on_eviction_blocked(p, spot(left=11), "PDB inference")
    due = on_eviction_blocked(p, spot(left=10), "PDB inference")
    assert (early.step, early.reason) == ("wait", "eviction blocked: PDB inference")
    assert due.step == "delete"
    assert due.grace_seconds == 10 - STOP_MARGIN_SECONDS
    assert "still blocked at deadline - grace" in due.reason


def test_terminating_pod_that_would_outlive_the_deadline_is_deleted_shorter() -> None:
    # Given a pod terminating with 60 s left on its grace but 20 s to the deadline
    late = pod(deletion_timestamp=NOW + timedelta(seconds=60))
    soon = pod(deletion_timestamp=NOW + timedelta(seconds=5))
    step = decide_pod(late, spot(left=20))
    # Then it is deleted again with a grace that ends before the deadline; one ending sooner is waited on
    assert (step.step, step.grace_seconds) == ("delete", 20 - STOP_MARGIN_SECONDS)
    assert decide_pod(soon, spot(left=20)).step == "wait"
    assert decide_pod(late, voluntary()).step == "wait"


def test_voluntary_blocked_pod_is_never_deleted() -> None:
    p = pod(grace=30)
    assert on_eviction_blocked(p, voluntary(NOW + timedelta(days=1)), "PDB").step == "wait"
    assert not must_delete(p, voluntary(NOW + timedelta(days=1)))


def test_blocked_pod_past_the_deadline_is_deleted_with_one_second_not_zero() -> None:
    # Given a pod whose eviction a PDB still refuses when the deadline has passed
    step = on_eviction_blocked(pod(grace=30), spot(left=-5), "PDB inference")
    # Then it is deleted with a grace of 1 s: 0 would remove it before its containers stop
    assert (step.step, step.grace_seconds) == ("delete", MIN_GRACE_SECONDS)


def test_a_pod_already_stopping_within_one_second_is_not_deleted_again() -> None:
    # Given the deadline has passed and a pod deleted with 1 s of grace is still terminating
    stopping = pod(deletion_timestamp=NOW + timedelta(seconds=MIN_GRACE_SECONDS))
    # Then the round waits for it: another delete could not shorten its grace
    assert decide_pod(stopping, spot(left=-3)).step == "wait"
    assert decide_pod(pod(deletion_timestamp=NOW + timedelta(seconds=5)), spot(left=-3)).step == "delete"


def test_higher_priority_pod_waits_while_a_lower_priority_pod_checkpoints() -> None:
    # Given a low-priority trainer waiting for its checkpoint and a high-priority server
    trainer = pod("trainer", priority=0, annotations=asked(NOW + timedelta(seconds=30)))
    server = pod("server", priority=1000)
    # When a voluntary round is decided
    steps = {s.pod: s for s in decide_round([server, trainer], voluntary())}
    # Then the server is held behind the trainer's priority, and says so
    assert steps["ml/trainer"].step == "wait"
    assert (steps["ml/server"].step, steps["ml/server"].held_for) == ("wait", 0)
    assert "lower priority (0)" in steps["ml/server"].reason
    # and once the trainer acknowledged, both are asked to leave in the same round
    acked = pod("trainer", priority=0, annotations=asked(NOW, **{ann.CHECKPOINT_DONE: ann.rfc3339(NOW)}))
    assert {s.step for s in decide_round([server, acked], voluntary())} == {"evict"}


def test_a_held_pod_goes_at_deadline_minus_its_grace_with_its_whole_grace() -> None:
    # Given a Spot drain: a low-priority trainer with a long checkpoint, a high-priority server (30 s grace)
    trainer = pod("trainer", priority=0, annotations=asked(NOW + timedelta(seconds=110)))
    server = pod("server", priority=1000, grace=30)
    ctx = spot(left=120)
    release = hold_until(server, ctx)
    assert release == NOW + timedelta(seconds=120 - 30 - STOP_MARGIN_SECONDS)
    # When the hold ends, the server is evicted with its own grace although the trainer still waits
    assert release is not None
    late = spot(now=release, left=120)
    steps = {s.pod: s for s in decide_round([server, trainer], late)}
    assert (steps["ml/server"].step, steps["ml/server"].grace_seconds) == ("evict", None)
    assert steps["ml/trainer"].step == "wait"


def test_leave_order_sends_lowest_priority_first_in_waves() -> None:
    pods = [pod("b", priority=10), pod("a", priority=-5), pod("c", priority=10), pod("d", priority=0)]
    steps = decide_round(pods, voluntary())
    waves = leave_order(steps, {p.key: p for p in pods})
    assert [[s.pod for s in wave] for wave in waves] == [["ml/a"], ["ml/d"], ["ml/b", "ml/c"]]


# ------------------------------------------------------------------------------ properties

pods = st.builds(
    pod,
    name=st.sampled_from(["a", "b", "c"]),
    grace=st.integers(min_value=0, max_value=600),
    phase=st.sampled_from(["Running", "Pending", "Succeeded", "Failed"]),
    owner_kind=st.sampled_from([None, "Job", "ReplicaSet", "DaemonSet"]),
    annotations=st.sampled_from(
        [{}, {MIRROR_ANNOTATION: "x"}, {ann.CHECKPOINT: "annotate"}, {ann.CHECKPOINT: "exec:x"}, {ann.CHECKPOINT: "?"}]
    ),
    deletion_timestamp=st.one_of(st.none(), st.integers(-120, 600).map(lambda s: NOW + timedelta(seconds=s))),
)
offsets = st.integers(min_value=-300, max_value=900)


@given(p=pods, now_offset=offsets, left=st.integers(min_value=-60, max_value=900))
def test_no_involuntary_delete_before_deadline_minus_grace(p: PodView, now_offset: int, left: int) -> None:
    # For any pod, time and deadline: a refused eviction becomes a delete only from deadline - grace on
    now = NOW + timedelta(seconds=now_offset)
    ctx = DrainContext(event_id=EVENT, involuntary=True, deadline=NOW + timedelta(seconds=left), now=now)
    step = on_eviction_blocked(p, ctx, "PDB")
    if step.step == "delete":
        assert now >= ctx.deadline - timedelta(seconds=p.grace_seconds)  # type: ignore[operator]
        assert step.grace_seconds is not None
        # never 0 (that removes the pod before its containers stop), never more than the pod's own
        assert MIN_GRACE_SECONDS <= step.grace_seconds <= max(MIN_GRACE_SECONDS, p.grace_seconds)
    else:
        assert now < ctx.deadline - timedelta(seconds=p.grace_seconds)  # type: ignore[operator]


@given(p=pods, now_offset=offsets, left=st.one_of(st.none(), st.integers(-60, 900)), involuntary=st.booleans())
def test_daemonset_mirror_and_finished_pods_always_skip(
    p: PodView, now_offset: int, left: int | None, involuntary: bool
) -> None:
    deadline = None if left is None else NOW + timedelta(seconds=left)
    ctx = DrainContext(EVENT, involuntary, deadline, NOW + timedelta(seconds=now_offset))
    step = decide_pod(p, ctx)
    if p.is_daemonset or p.is_mirror or p.finished:
        assert step.step == "skip"
    else:
        assert step.step != "skip"


@given(p=pods, now_offset=offsets)
def test_voluntary_never_deletes(p: PodView, now_offset: int) -> None:
    ctx = DrainContext(EVENT, False, None, NOW + timedelta(seconds=now_offset))
    assert decide_pod(p, ctx).step != "delete"
    assert on_eviction_blocked(p, ctx, "PDB").step != "delete"
    assert decide_pod(p, ctx).grace_seconds is None


@given(p=pods, now_offset=offsets, left=st.integers(-60, 900))
def test_involuntary_grace_never_outlasts_the_deadline(p: PodView, now_offset: int, left: int) -> None:
    now = NOW + timedelta(seconds=now_offset)
    deadline = NOW + timedelta(seconds=left)
    step = decide_pod(p, DrainContext(EVENT, True, deadline, now))
    if step.step in ("evict", "delete") and step.grace_seconds is not None:
        assert step.grace_seconds >= MIN_GRACE_SECONDS
        assert now + timedelta(seconds=step.grace_seconds) <= max(now + timedelta(seconds=MIN_GRACE_SECONDS), deadline)


prioritised = st.builds(
    pod,
    name=st.sampled_from(["a", "b", "c", "d", "e"]),
    priority=st.integers(-10, 10),
    annotations=st.sampled_from([{}, {ann.CHECKPOINT: "annotate"}, asked(NOW + timedelta(seconds=30))]),
    deletion_timestamp=st.one_of(st.none(), st.just(NOW + timedelta(seconds=5))),
)


@settings(deadline=None)  # a loaded machine must not fail a pure property on wall time
@given(ps=st.lists(prioritised, max_size=6, unique_by=lambda p: p.name), involuntary=st.booleans())
def test_no_pod_is_asked_to_leave_before_a_lower_priority_pod_that_still_stays(
    ps: list[PodView], involuntary: bool
) -> None:
    # For any pods well before any deadline: a pod asked to leave this round has no lower-priority
    # pod that is not asked yet (still to be signalled or waiting for its checkpoint)
    ctx = DrainContext(EVENT, involuntary, NOW + timedelta(seconds=600) if involuntary else None, NOW)
    steps = decide_round(ps, ctx)
    by_key = {p.key: p for p in ps}
    leaving = [by_key[s.pod] for s in steps if s.step in ("evict", "delete") and not by_key[s.pod].terminating]
    staying = [by_key[s.pod] for s in steps if s.step == "signal" or (s.step == "wait" and s.held_for is None)]
    staying = [p for p in staying if not p.terminating]
    for p in leaving:
        assert all(p.priority <= q.priority for q in staying), (p, staying)


def test_a_deadline_delete_after_a_pdb_block_keeps_why_the_pod_was_leaving() -> None:
    # Given an opted-in pod whose eviction (the deadline passed before it could be asked) a PDB refused
    p = pod(grace=30)
    # When the deadline says it must be deleted now
    step = on_eviction_blocked(
        p, spot(left=-5), "PDB inference", because="deadline passed before a checkpoint could be asked"
    )
    # Then the delete still says why it left without a checkpoint, and why it was deleted
    assert step.step == "delete"
    assert step.reason.startswith(
        "deadline passed before a checkpoint could be asked; still blocked at deadline - grace"
    )
