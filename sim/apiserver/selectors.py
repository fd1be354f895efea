"""Label selectors (string syntax and ``LabelSelector`` objects) and field selectors."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sim.apiserver.errors import bad_request

Labels = Mapping[str, str]


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!", "gt", "lt"
    values: tuple[str, ...] = ()

    def matches(self, labels: Labels) -> bool:
        present = self.key in labels
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op == "exists":
            return present
        if self.op == "!":
            return not present
        if not present or value is None:
            return False
        try:
            number, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return number > bound if self.op == "gt" else number < bound


Selector = tuple[Requirement, ...]

_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s+(in|notin)\s*\(([^)]*)\)\s*$")
_CMP_RE = re.compile(r"^\s*([A-Za-z0-9./_-]+)\s*(==|=|!=|>|<)\s*([A-Za-z0-9._-]*)\s*$")
_KEY_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9./_-]+)\s*$")


def _split_top(text: str) -> list[str]:
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str | None) -> Selector:
    """Parse ``a=b,c!=d,e in (x,y),f notin (z),g,!h,n>3``; raises a 400 ApiError."""
    if not text:
        return ()
    reqs: list[Requirement] = []
    for part in _split_top(text):
        if m := _SET_RE.match(part):
            if m.group(1):
                raise bad_request(f"unable to parse requirement: {part}")
            values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
            reqs.append(Requirement(m.group(2), m.group(3), values))
        elif m := _CMP_RE.match(part):
            op = {"==": "=", "=": "=", "!=": "!=", ">": "gt", "<": "lt"}[m.group(2)]
            reqs.append(Requirement(m.group(1), op, (m.group(3),)))
        elif m := _KEY_RE.match(part):
            reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
        else:
            raise bad_request(f"unable to parse requirement: found '{part}', expected: valid selector")
    return tuple(reqs)


def matches(selector: Selector, labels: Labels | None) -> bool:
    labels = labels or {}
    return all(r.matches(labels) for r in selector)


def from_label_selector_object(obj: Mapping[str, Any] | None) -> Selector | None:
    """A ``metav1.LabelSelector``; ``None`` (no selector) matches nothing, ``{}`` matches all."""
    if obj is None:
        return None
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (obj.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in obj.get("matchExpressions") or []:
        op = ops.get(str(expr.get("operator")))
        if op is None:
            raise bad_request(f"{expr.get('operator')!r} is not a valid label selector operator")
        reqs.append(Requirement(str(expr["key"]), op, tuple(str(v) for v in expr.get("values") or [])))
    return tuple(reqs)


@dataclass(frozen=True)
class FieldRequirement:
    path: str
    value: str
    negate: bool


def parse_field_selector(text: str | None, allowed: Sequence[str]) -> tuple[FieldRequirement, ...]:
    if not text:
        return ()
    reqs = []
    for part in text.split(","):
        if not part.strip():
            continue
        m = re.match(r"^\s*([A-Za-z0-9.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        path, op, value = m.groups()
        if path not in allowed:
            raise bad_request(f"field label not supported: {path}")
        reqs.append(FieldRequirement(path, value, op == "!="))
    return tuple(reqs)


def field_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    if path == "source" and isinstance(cur, Mapping):  # events: source is the component
        cur = cur.get("component")
    if isinstance(cur, bool):
        return "true" if cur else "false"
    if path == "spec.unschedulable" and cur is None:
        return "false"
    return "" if cur is None else str(cur)


def field_matcher(reqs: tuple[FieldRequirement, ...]) -> Callable[[Mapping[str, Any]], bool]:
    def match(obj: Mapping[str, Any]) -> bool:
        return all((field_value(obj, r.path) == r.value) != r.negate for r in reqs)

    return match
