"""Each behaviour that can disrupt a node, switched by name in the policy (docs/policy.md#switches).

One table: the kind (or Scheduler tick) a switch governs -> the switch's dotted name. The use
cases never read a switch: routing answers a switched-off notice `ignored`, naming the switch,
and the stack (infra/) creates no alarm, rule or schedule for what is off.
"""

from __future__ import annotations

from typing import Any

from gpuwarden.domain.policy import Policy

#: notice kind -> the switch that turns its handling off. `gpu_health.enabled` governs the
#: `gpu-unhealthy` kind once the policy has that section (a missing section counts as on).
KIND_SWITCHES: dict[str, str] = {
    "gpu-idle": "gpu_idle.enabled",
    "gpu-unhealthy": "gpu_health.enabled",
    "rebalance": "rebalance.enabled",
    "scheduled-maintenance": "maintenance.enabled",
    "capacity-block-plan": "capacity_blocks.enabled",
}

#: Scheduler tick action -> its switch.
TICK_SWITCHES: dict[str, str] = {
    "open": "nodepool_windows.enabled",
    "close": "nodepool_windows.enabled",
    "maintenance-due": "maintenance.enabled",
    "capacity-block-due": "capacity_blocks.enabled",
}

#: Every switch, in the order `doctor` prints them (rebalance's drain is `rebalance.action`).
SWITCHES: tuple[str, ...] = (
    "gpu_idle.enabled",
    "gpu_health.enabled",
    "rebalance.enabled",
    "maintenance.enabled",
    "capacity_blocks.enabled",
    "nodepool_windows.enabled",
)


def is_on(policy: Policy, switch: str) -> bool:
    """The switch's value; a section this version's policy does not have is on (its default)."""
    if not switch:
        return True
    value: Any = policy
    for part in switch.split("."):
        value = getattr(value, part, None)
        if value is None:
            return True
    return bool(value)


def off_reason(policy: Policy, switch: str | None) -> str | None:
    """Why a switched-off behaviour ignores its input; None when it is on."""
    if switch is None or is_on(policy, switch):
        return None
    return f"{switch} is false in the policy: this behaviour is switched off"


def behaviours(policy: Policy) -> dict[str, bool]:
    """What is on, by switch name (doctor prints it), rebalance's drain included."""
    present = {s: is_on(policy, s) for s in SWITCHES if _has_section(policy, s)}
    present["rebalance.action=drain"] = present.get("rebalance.enabled", True) and policy.rebalance.action == "drain"
    return present


def _has_section(policy: Policy, switch: str) -> bool:
    return hasattr(policy, switch.split(".", 1)[0])
