"""A NodePool's disruption budgets as Karpenter reads them (domain.budgets).

The first tables are Karpenter's own cases (kubernetes-sigs/karpenter v1.13.0,
pkg/apis/v1/nodepool_budgets_test.go: its clock, its six budgets, its expectations; Go's
``math.MaxInt32`` is None here, "no budget limits it"). The rest are gpuwarden's: the pool's
nodes and those being disrupted (pkg/controllers/disruption/helpers.go,
``BuildDisruptionBudgetMapping``), the reason of a gpu-idle notice, and the windows asked first.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from gpuwarden.domain import annotations as ann
from gpuwarden.domain.budgets import (
    EMPTY,
    UNDERUTILIZED,
    BudgetInvalid,
    allowed_by_budgets,
    budget_active,
    budget_answer,
    budget_nodes,
    gpu_idle_reason,
    voluntary_verdict,
)
from gpuwarden.domain.nodepools import Budget, NodeClaimView, NodePoolView, nodepool_from_json
from gpuwarden.domain.notice import Kind
from gpuwarden.domain.views import NodeCondition, NodeView, PodView, Taint
from gpuwarden.domain.windows import Allowance
from gpuwarden.domain.windows.cron import parse_robfig
from gpuwarden.kinds.registry import spec_of

DRIFTED = "Drifted"
HOUR = timedelta(hours=1)
#: "the middle of the year of 2000, the best year ever"
KARPENTER_NOW = datetime(2000, 6, 15, 12, 30, 30, tzinfo=UTC)
REASONS = (EMPTY, UNDERUTILIZED, DRIFTED)


def karpenters_budgets() -> list[Budget]:
    return [
        Budget("10", "* * * * *", HOUR),
        Budget("100", "* * * * *", HOUR),
        Budget("100%", "* * * * *", HOUR),
        Budget("15", "* * * * *", HOUR, (DRIFTED, UNDERUTILIZED)),
        Budget("5", "* * * * *", HOUR, (DRIFTED,)),
        Budget("0", "@weekly", HOUR, (UNDERUTILIZED, DRIFTED, EMPTY)),
    ]


def pool(budgets: list[Budget], name: str = "gpu-training") -> NodePoolView:
    return NodePoolView(name=name, budgets=tuple(budgets))


def allowed(budgets: list[Budget], reason: str, now: datetime = KARPENTER_NOW, size: int = 100) -> int | None:
    return allowed_by_budgets(pool(budgets), size, reason, now)[0]


# ----------------------------------------------------------- Karpenter's GetAllowedDisruptionsByReason


def test_a_budget_active_for_all_reasons_allows_none_for_every_reason() -> None:
    budgets = karpenters_budgets()
    budgets[5] = replace(budgets[5], schedule="* * * * *")
    assert [allowed(budgets, r) for r in REASONS] == [0, 0, 0]


def test_no_active_budget_limits_no_reason() -> None:
    budgets = [replace(b, schedule="@yearly", duration=HOUR) for b in karpenters_budgets()]
    assert [allowed(budgets, r) for r in REASONS] == [None, None, None]


def test_inactive_reason_budgets_are_ignored() -> None:
    budgets = karpenters_budgets()
    budgets[3] = replace(budgets[3], schedule="@yearly")
    budgets[4] = replace(budgets[4], schedule="@yearly")
    assert [allowed(budgets, r) for r in REASONS] == [10, 10, 10]


def test_a_budget_without_reasons_applies_to_every_reason() -> None:
    assert [allowed(karpenters_budgets()[:1], r) for r in REASONS] == [10, 10, 10]


def test_each_reason_gets_the_smallest_budget_that_applies_to_it() -> None:
    budgets = [*karpenters_budgets(), Budget("4", "* * * * *", HOUR, (EMPTY,))]
    assert (allowed(budgets, EMPTY), allowed(budgets, DRIFTED), allowed(budgets, UNDERUTILIZED)) == (4, 5, 10)


# ----------------------------------------------------------- Karpenter's GetAllowedDisruptions / IsActive


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"schedule": "@wrongly"}, "invalid"),
        ({"nodes": "1000a%"}, "invalid"),
        ({"schedule": "@yearly"}, None),
        ({}, 10),
    ],
    ids=["invalid-schedule-is-zero", "invalid-nodes-is-zero", "inactive-is-unbounded", "active-int"],
)
def test_one_budget_allows_its_nodes_while_active(change: dict[str, str], expected: int | str | None) -> None:
    budget = replace(karpenters_budgets()[0], **change)  # type: ignore[arg-type]
    if expected == "invalid":
        with pytest.raises(BudgetInvalid):
            budget_nodes(budget, 100, KARPENTER_NOW)
        assert allowed([budget], EMPTY) == 0  # MustGetAllowedDisruptions fails closed
    else:
        assert budget_nodes(budget, 100, KARPENTER_NOW) == expected


def test_a_percentage_budget_is_of_the_pools_nodes() -> None:
    assert budget_nodes(karpenters_budgets()[2], 100, KARPENTER_NOW) == 100


@pytest.mark.parametrize(
    ("now", "schedule", "duration", "active"),
    [
        # "should always consider a schedule and time in UTC": June 0 = May 31, 00:00 at UTC+1
        (datetime(2000, 5, 31, tzinfo=timezone(timedelta(hours=1))), "@daily", timedelta(minutes=30), False),
        (KARPENTER_NOW, None, None, True),
        (KARPENTER_NOW, "* * * * *", HOUR, True),
        (KARPENTER_NOW, "@yearly", HOUR, False),
        # "active when the schedule hit is in the middle of the duration": the year 1000
        (datetime(1000, 1, 1, 12, tzinfo=UTC), "@yearly", timedelta(hours=24), True),
        # "active when the duration is longer than the recurrence"
        (datetime(2024, 1, 7, tzinfo=UTC), "@daily", timedelta(hours=48), True),
        # "inactive when the schedule hit is after the duration"
        (datetime(2024, 1, 7, tzinfo=UTC), "30 6 * * SUN", timedelta(hours=6), False),
    ],
    ids=["utc", "no-schedule", "every-minute", "yearly", "year-1000", "longer-than-recurrence", "after-duration"],
)
def test_a_budget_is_active_as_karpenter_says(
    now: datetime, schedule: str | None, duration: timedelta | None, active: bool
) -> None:
    assert budget_active(Budget("10", schedule, duration), now) is active


def test_a_backwards_range_says_why_it_does_not_parse() -> None:
    with pytest.raises(BudgetInvalid, match=r"beginning of range \(2\) beyond end of range \(1\)"):
        budget_active(Budget("10", "0 0 * * tue-mon", timedelta(hours=6)), datetime(2024, 1, 7, tzinfo=UTC))


# ----------------------------------------------------------- robfig/cron's edges, as Karpenter meets them


def test_a_fire_exactly_one_duration_ago_no_longer_counts() -> None:
    # Given a budget that opened at 09:00 for 1h, When it is 10:00:00 exactly (and a second before)
    budget = Budget("0", "0 9 * * *", HOUR)
    # Then robfig's Next(now - 1h) is strictly after 09:00: closed at 10:00, open at 09:59:59
    assert budget_active(budget, datetime(2026, 6, 1, 10, tzinfo=UTC)) is False
    assert budget_active(budget, datetime(2026, 6, 1, 9, 59, 59, tzinfo=UTC)) is True


def test_a_schedule_that_never_fires_is_always_active() -> None:
    # robfig returns Go's zero time after five years of searching, and the zero time is not after now
    assert budget_active(Budget("0", "0 0 30 2 *", HOUR), KARPENTER_NOW) is True


def test_a_duration_without_a_schedule_fails_closed() -> None:
    assert allowed([Budget("5", None, HOUR)], EMPTY) == 0


def test_a_stepped_star_is_a_restricted_day_field_in_robfig() -> None:
    # Given "*/2" in day-of-month and MON: robfig clears the star bit for a step above 1, so a day
    # matches either field (Vixie cron, and the policy's windows, would need both)
    schedule = parse_robfig("0 0 */2 * MON")
    assert schedule.days_or_weekdays is True
    assert parse_robfig("0 0 * * MON").days_or_weekdays is False


def test_day_of_week_seven_and_a_time_zone_prefix_do_not_parse_in_robfig() -> None:
    for text in ("0 0 * * 7", "CRON_TZ=Asia/Seoul 0 9 * * *", "@every 1h"):
        assert allowed([Budget("5", text, HOUR)], EMPTY) == 0, text


def test_reasons_written_empty_apply_to_no_reason() -> None:
    assert allowed([Budget("0", reasons=())], EMPTY) is None


# ----------------------------------------------------------- the pool's nodes


def ready(name: str, pool_name: str = "gpu-training", **extra: object) -> NodeView:
    labels = {"karpenter.sh/nodepool": pool_name, "karpenter.sh/initialized": "true"}
    base = NodeView(
        name=name,
        resource_version="1",
        labels=labels,
        conditions={"Ready": NodeCondition("Ready", "True")},
    )
    return replace(base, **extra)  # type: ignore[arg-type]


def four_nodes() -> list[NodeView]:
    return [ready(f"n{i}") for i in range(4)]


def test_a_budget_of_zero_refuses_naming_the_pool_and_the_budget() -> None:
    # Given the seed's training pool: "disable consolidation during training"
    training = pool([Budget("0")])
    nodes = four_nodes()
    # When a gpu-idle reclaim asks for one of its nodes
    answer = budget_answer(training, nodes[0], nodes, UNDERUTILIZED, KARPENTER_NOW)
    # Then none is allowed, and the reason names the pool and its budget
    assert answer.refused
    assert answer.reason.startswith("NodePool gpu-training budget #1 (nodes '0') allows 0 of its 4 nodes")


def test_a_percentage_rounds_up_over_the_pools_initialized_nodes() -> None:
    # Given 10 % of a pool of 4 initialized nodes and 2 that Karpenter does not count yet
    nodes = [*four_nodes(), ready("new", labels={"karpenter.sh/nodepool": "gpu-training"}), ready("other", "cpu")]
    answer = budget_answer(pool([Budget("10%")]), nodes[0], nodes, None, KARPENTER_NOW)
    # Then 10 % of 4 is 0.4, rounded up to 1
    assert (answer.allowed, answer.refused) == (1, False)
    assert "of its 4 nodes" in answer.reason


def test_a_node_karpenter_has_not_initialized_is_not_counted_and_the_reason_says_so() -> None:
    # Given a pool whose only node runs pods before Karpenter has initialized it
    fresh = ready("fresh", labels={"karpenter.sh/nodepool": "gpu-training"})
    # When a voluntary action asks for it under 10 %
    answer = budget_answer(pool([Budget("10%")]), fresh, [fresh], None, KARPENTER_NOW)
    # Then 10 % of no node is none, as Karpenter's own disruption would find, and the reason says why
    assert answer.refused
    assert answer.reason.endswith("0 more (fresh is not counted: Karpenter has not initialized it yet)")


@pytest.mark.parametrize(
    "disrupted",
    [
        {"taints": (Taint("karpenter.sh/disrupted", "NoSchedule"),)},
        {"deleting": True},
        {"annotations": {ann.EVENT_ID: "evt-1", ann.KIND: "rebalance"}},
        {"conditions": {"Ready": NodeCondition("Ready", "False")}},
    ],
    ids=["karpenter-taint", "deleting", "gpuwarden-mark", "not-ready"],
)
def test_nodes_being_disrupted_use_up_the_budget(disrupted: dict[str, object]) -> None:
    nodes = four_nodes()
    nodes[1] = replace(nodes[1], **disrupted)  # type: ignore[arg-type]
    answer = budget_answer(pool([Budget("1")]), nodes[0], nodes, UNDERUTILIZED, KARPENTER_NOW)
    assert answer.refused
    assert "1 being disrupted (n1)" in answer.reason


def test_the_node_asked_about_does_not_count_against_itself() -> None:
    nodes = four_nodes()
    nodes[0] = replace(nodes[0], annotations={ann.EVENT_ID: "evt-1", ann.KIND: "gpu-idle"})
    assert budget_answer(pool([Budget("1")]), nodes[0], nodes, UNDERUTILIZED, KARPENTER_NOW).allowed == 1


def test_a_deleting_nodeclaim_counts_and_a_terminating_instance_leaves_the_pool() -> None:
    nodes = four_nodes()
    claims = [
        NodeClaimView("c1", node_name="n1", deleting=True),
        NodeClaimView("c2", node_name="n2", conditions={"InstanceTerminating": "True"}),
    ]
    answer = budget_answer(pool([Budget("50%")]), nodes[0], nodes, None, KARPENTER_NOW, claims)
    # 50 % of the 3 nodes left is 2 (rounded up), less n1 being deleted: 1
    assert answer.allowed == 1
    assert "of its 3 nodes" in answer.reason


def test_an_invalid_budget_for_another_reason_stops_every_reason() -> None:
    budgets = [Budget("10"), Budget("5", "not a cron", HOUR, (DRIFTED,))]
    answer = budget_answer(pool(budgets), four_nodes()[0], four_nodes(), UNDERUTILIZED, KARPENTER_NOW)
    assert answer.refused
    assert "budget #2" in answer.reason
    assert "does not read" in answer.reason


def test_a_kind_without_a_reason_counts_only_under_budgets_without_reasons() -> None:
    budgets = [Budget("0", reasons=(UNDERUTILIZED,)), Budget("3")]
    nodes = four_nodes()
    assert budget_answer(pool(budgets), nodes[0], nodes, None, KARPENTER_NOW).allowed == 3
    assert budget_answer(pool(budgets), nodes[0], nodes, UNDERUTILIZED, KARPENTER_NOW).refused


def test_a_pool_without_budgets_has_karpenters_default_and_an_empty_list_has_none() -> None:
    base = {"metadata": {"name": "p"}, "spec": {"template": {"spec": {}}}}
    defaulted = nodepool_from_json(base)
    emptied = nodepool_from_json({**base, "spec": {"disruption": {"budgets": []}}})
    assert [b.nodes for b in defaulted.budgets] == ["10%"]
    assert budget_answer(emptied, four_nodes()[0], four_nodes(), None, KARPENTER_NOW).allowed is None


def test_budgets_are_read_from_the_nodepool_json() -> None:
    view = nodepool_from_json(
        {
            "metadata": {"name": "gpu-training"},
            "spec": {
                "disruption": {
                    "budgets": [
                        {"nodes": "0", "schedule": "0 9 * * mon-fri", "duration": "8h", "reasons": ["Underutilized"]}
                    ]
                }
            },
        }
    )
    assert view.budgets == (Budget("0", "0 9 * * mon-fri", timedelta(hours=8), (UNDERUTILIZED,)),)
    monday_10 = datetime(2026, 6, 1, 10, tzinfo=UTC)
    assert budget_answer(view, four_nodes()[0], four_nodes(), UNDERUTILIZED, monday_10).refused
    assert not budget_answer(view, four_nodes()[0], four_nodes(), EMPTY, monday_10).refused


# ----------------------------------------------------------- the kind's reason, the windows first


def pod(name: str, **extra: object) -> PodView:
    return replace(PodView(namespace="ml", name=name, uid=name, node_name="n0", phase="Running"), **extra)  # type: ignore[arg-type]


def test_a_gpu_idle_node_with_only_daemon_mirror_and_finished_pods_is_empty() -> None:
    pods = [
        pod("dcgm", owner_kind="DaemonSet"),
        pod("static", annotations={"kubernetes.io/config.mirror": "x"}),
        pod("done", phase="Succeeded"),
        pod("leaving", deletion_timestamp=KARPENTER_NOW),
    ]
    assert gpu_idle_reason(pods) == EMPTY
    assert gpu_idle_reason([*pods, pod("triton")]) == UNDERUTILIZED
    assert gpu_idle_reason([pod("web-0", owner_kind="StatefulSet", deletion_timestamp=KARPENTER_NOW)]) == UNDERUTILIZED
    reason = spec_of(Kind.GPU_IDLE).karpenter_reason
    assert reason is not None
    assert (reason(pods), spec_of(Kind.REBALANCE).karpenter_reason) == (EMPTY, None)


def test_the_windows_are_asked_first_and_the_refusal_names_whichever_refused() -> None:
    frozen = Allowance(0, "business-hours-freeze", "window 'business-hours-freeze' freezes voluntary disruption")
    open_ = Allowance(None, None, "no window open")
    nodes = four_nodes()
    refusing = budget_answer(pool([Budget("0")]), nodes[0], nodes, UNDERUTILIZED, KARPENTER_NOW)
    both = voluntary_verdict(frozen, refusing)
    budget_only = voluntary_verdict(open_, refusing)
    neither = voluntary_verdict(open_, budget_answer(pool([Budget("2")]), nodes[0], nodes, None, KARPENTER_NOW))
    assert (both.by, both.refused) == ("window", frozen.reason)
    assert (budget_only.by, budget_only.refused) == ("budget", refusing.reason)
    assert (neither.by, neither.refused) == (None, None)
    assert voluntary_verdict(open_, None).refused is None  # a node outside Karpenter, or a forced runbook
