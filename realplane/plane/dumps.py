"""Kubernetes objects as JSON for a test's assertion messages and artifacts."""

from __future__ import annotations

import json
from typing import Any


def dump(obj: Any) -> str:
    """JSON for an assertion message: without managedFields, cut at 4,000 characters."""
    return dump_full(obj)[:4000]


def dump_full(obj: Any) -> str:
    """JSON of Kubernetes objects without their managedFields."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "managedFields"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(obj), indent=1, default=str)
