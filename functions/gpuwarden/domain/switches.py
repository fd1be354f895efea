"""Each behaviour that can disrupt a node, switched by name in the policy (docs/policy.md#switches).

A kind's spec names its switch (gpuwarden/kinds/): the use cases never read one; the dispatch
answers a switched-off notice or tick `ignored`, naming the switch, and the stack (infra/) creates
no alarm, rule or schedule for what is off. Here: reading a switch's value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuwarden.domain.policy import Policy


def is_on(policy: Policy, switch: str) -> bool:
    """The switch's value; a section this version's policy does not have is on (its default)."""
    if not switch:
        return True
    value = _at(policy, switch)
    return True if value is None else bool(value)


def off_reason(policy: Policy, switch: str | None) -> str | None:
    """Why a switched-off behaviour ignores its input; None when it is on."""
    if switch is None or is_on(policy, switch):
        return None
    return f"{switch} is false in the policy: this behaviour is switched off"


def behaviours(policy: Policy, switches: Sequence[str]) -> dict[str, bool]:
    """What is on, by switch name (doctor prints it), rebalance's drain included."""
    present = {s: is_on(policy, s) for s in switches if _has_section(policy, s)}
    drains = _at(policy, "rebalance.action") == "drain"  # read by name, as the switches: the section is the kind's
    present["rebalance.action=drain"] = present.get("rebalance.enabled", True) and drains
    return present


def _at(policy: Policy, path: str) -> object:
    """The value at a dotted ``path`` of the policy (None: this policy model has no such key)."""
    value: Any = policy
    for part in path.split("."):
        value = getattr(value, part, None)
    return value


def _has_section(policy: Policy, switch: str) -> bool:
    return hasattr(policy, switch.split(".", 1)[0])
