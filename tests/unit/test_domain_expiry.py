"""karpenter-expiry (domain.expiry): a node's expiry from its NodeClaim, and the drain planned before it
with the planner maintenance uses; the policy keys that go with it (docs/policy.md)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from gpuwarden.domain.expiry import expiry_of, plan_expiry
from gpuwarden.domain.nodepools import nodeclaim_from_json, parse_go_duration
from gpuwarden.domain.policy import Policy, section_of
from gpuwarden.domain.windows import Window
from gpuwarden.kinds.karpenter_expiry.policy import KarpenterExpiryPolicy
from gpuwarden.kinds.registry import POLICY

CREATED = "2026-06-01T00:00:00Z"
LEAD = timedelta(minutes=30)
DRAIN = timedelta(hours=1)


def claim(expire_after: str | None, created: str | None = CREATED) -> dict[str, object]:
    spec = {"nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "gpu"}}
    if expire_after is not None:
        spec["expireAfter"] = expire_after  # type: ignore[assignment]
    meta: dict[str, object] = {"name": "gpu-training-x7k2p", "labels": {"karpenter.sh/nodepool": "gpu-training"}}
    if created:
        meta["creationTimestamp"] = created
    return {"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": meta, "spec": spec}


# ------------------------------------------------------------------------------ the expiry


@pytest.mark.parametrize(
    ("expire_after", "at"),
    [
        ("336h", datetime(2026, 6, 15, tzinfo=UTC)),
        ("720h", datetime(2026, 7, 1, tzinfo=UTC)),
        ("1h30m", datetime(2026, 6, 1, 1, 30, tzinfo=UTC)),
        ("Never", None),
        (None, None),
    ],
    ids=["seed-two-weeks", "karpenters-default", "compound", "never", "absent"],
)
def test_a_nodes_expiry_is_its_nodeclaims_creation_plus_expire_after(
    expire_after: str | None, at: datetime | None
) -> None:
    assert expiry_of(nodeclaim_from_json(claim(expire_after))).at == at


def test_an_expiry_that_does_not_read_or_has_no_creation_is_none_with_why() -> None:
    unreadable = expiry_of(nodeclaim_from_json(claim("two weeks")))
    uncreated = expiry_of(nodeclaim_from_json(claim("720h", created=None)))
    assert (unreadable.at, uncreated.at) == (None, None)
    assert "Karpenter cannot read it either" in unreadable.reason
    assert "no creationTimestamp" in uncreated.reason


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("720h", timedelta(hours=720)),
        ("1.5h", timedelta(minutes=90)),
        ("90s", timedelta(seconds=90)),
        ("0", timedelta()),
    ],
)
def test_durations_read_as_go_reads_them(text: str, span: timedelta) -> None:
    assert parse_go_duration(text) == span


@pytest.mark.parametrize("text", ["", "7d", "h", "1h-30m", "1 h"])
def test_durations_go_refuses_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_go_duration(text)


# ------------------------------------------------------------------------------ the plan


NIGHTS = Window(name="nights", schedule="0 22 * * *", timezone="UTC", duration=timedelta(hours=6), max_disruptions=2)
FREEZE = Window(name="freeze", schedule="0 9 * * *", timezone="UTC", duration=timedelta(hours=10), max_disruptions=0)


def test_an_expiry_20_minutes_away_is_drained_now_and_no_longer_voluntary() -> None:
    now = datetime(2026, 6, 14, 23, 40, tzinfo=UTC)
    plan = plan_expiry(datetime(2026, 6, 15, tzinfo=UTC), LEAD, [NIGHTS], now, "gpu-training", DRAIN)
    assert (plan.due, plan.voluntary, plan.drain_at) == (True, False, now)
    assert "has come: drain now" in plan.reason


def test_an_expiry_29_days_away_is_planned_in_the_latest_window_before_its_lead_time() -> None:
    # Given a node that expires on July 1 at 12:00 and a nightly window 22:00-04:00
    now = datetime(2026, 6, 2, 12, tzinfo=UTC)
    expiry = datetime(2026, 7, 1, 12, tzinfo=UTC)
    # When its drain is planned
    plan = plan_expiry(expiry, LEAD, [NIGHTS, FREEZE], now, "gpu-training", DRAIN)
    # Then it starts in the last night before 11:30 on July 1: June 30 22:00
    assert (plan.window, plan.drain_at) == ("nights", datetime(2026, 6, 30, 22, tzinfo=UTC))
    assert (plan.due, plan.voluntary, plan.latest) == (False, True, datetime(2026, 7, 1, 11, 30, tzinfo=UTC))


def test_without_a_window_the_drain_starts_its_lead_time_before_the_expiry() -> None:
    now = datetime(2026, 6, 2, tzinfo=UTC)
    plan = plan_expiry(datetime(2026, 6, 15, tzinfo=UTC), LEAD, [], now, "gpu-training", DRAIN)
    assert (plan.drain_at, plan.window, plan.due) == (datetime(2026, 6, 14, 23, 30, tzinfo=UTC), None, False)
    frozen = plan_expiry(datetime(2026, 6, 15, tzinfo=UTC), LEAD, [FREEZE], now, "gpu-training", DRAIN)
    assert "no allowed window fits" in frozen.reason


def test_a_window_open_now_is_due_now() -> None:
    now = datetime(2026, 6, 14, 23, tzinfo=UTC)
    plan = plan_expiry(datetime(2026, 6, 15, 3, tzinfo=UTC), LEAD, [NIGHTS], now, "gpu-training", DRAIN)
    assert (plan.window, plan.drain_at, plan.due, plan.voluntary) == ("nights", now, True, True)


# ------------------------------------------------------------------------------ the policy keys


def test_the_new_keys_default_as_the_contract_says() -> None:
    policy = POLICY(cluster="ml-prod")
    expiry = section_of(policy, KarpenterExpiryPolicy)
    assert (expiry.enabled, expiry.lead_minutes) == (True, 30)
    assert (policy.replacement.hold_minutes, policy.replacement.attempts) == (15, 3)
    assert policy.gpu_health.node_selector == ""


@pytest.mark.parametrize(
    "section",
    [
        {"karpenter_expiry": {"lead_minutes": 0}},
        {"karpenter_expiry": {"lead": 30}},
        {"replacement": {"attempts": 0}},
        {"replacement": {"hold_minutes": 2000}},
        {"gpu_health": {"node_selector": "gpu in (a,b)"}},
        {"gpu_health": {"node_selector": "a=b,"}},
    ],
    ids=["lead-zero", "unknown-key", "no-attempt", "hold-a-day-and-more", "set-based-selector", "empty-term"],
)
def test_settings_it_does_not_understand_are_refused(section: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        POLICY.model_validate({"cluster": "ml-prod", **section})


@pytest.mark.parametrize("selector", ["karpenter.k8s.aws/instance-gpu-count", "nvidia.com/gpu.present=true", "a!=b,!c"])
def test_equality_selectors_are_kept(selector: str) -> None:
    assert (
        Policy.model_validate({"cluster": "c", "gpu_health": {"node_selector": selector}}).gpu_health.node_selector
        == selector
    )
