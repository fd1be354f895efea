"""Kubernetes' scheduling predicates gpuwarden needs, as the scheduler decides them: a taint
tolerated (`v1.Toleration.ToleratesTaint`), a node-selector requirement matched (In, NotIn, Exists,
DoesNotExist, Gt, Lt). Both the replacement's placement and GPU-idle's "where do the pods go
next" read a pod's constraints through these (pure)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuwarden.domain.views import NodeSelectorRequirement, Taint, Toleration


def tolerates(tolerations: Sequence[Toleration], taint: Taint) -> bool:
    """Kubernetes' `ToleratesTaint`: an empty effect matches every effect; `Exists` with an empty
    key matches every taint; `Equal` (the default) compares the value."""
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.operator == "Exists":
            if not t.key or t.key == taint.key:
                return True
            continue
        if t.key == taint.key and (t.value or "") == (taint.value or ""):
            return True
    return False


def _int(value: str) -> int | None:
    try:
        return int(value)
    except ValueError:
        return None


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    ops: dict[str, Callable[[], bool]] = {
        "In": lambda: value is not None and value in req.values,
        "NotIn": lambda: value is None or value not in req.values,
        "Exists": lambda: value is not None,
        "DoesNotExist": lambda: value is None,
        "Gt": lambda: _compare(value, req.values, lambda a, b: a > b),
        "Lt": lambda: _compare(value, req.values, lambda a, b: a < b),
    }
    test = ops.get(req.operator)
    return test() if test is not None else False  # an operator it does not know: no match (fail closed)


def _compare(value: str | None, values: Sequence[str], op: Callable[[int, int], bool]) -> bool:
    if value is None or len(values) != 1:
        return False
    left, right = _int(value), _int(values[0])
    return left is not None and right is not None and op(left, right)
