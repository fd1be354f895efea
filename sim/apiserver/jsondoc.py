"""JSON documents as the simulator holds them: dicts, lists, strings, numbers, booleans, None."""

from __future__ import annotations

from typing import TypeVar, cast

T = TypeVar("T")


def clone(value: T) -> T:
    """A deep copy of a JSON document: what `copy.deepcopy` gives for one, several times faster
    (no memo, no dispatch on type). Other values are shared, as a document holds none."""
    if isinstance(value, dict):
        return cast(T, {k: clone(v) for k, v in value.items()})
    if isinstance(value, list):
        return cast(T, [clone(v) for v in value])
    return value
