"""Reading the API server's answers: its `Status` bodies, `Retry-After`, an exec's status channel."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def status_message(body: bytes) -> tuple[str, list[dict[str, Any]]]:
    try:
        status = json.loads(body or b"{}")
    except ValueError:
        return body[:200].decode("utf-8", "replace"), []
    if not isinstance(status, dict):
        return str(status)[:200], []
    causes = (status.get("details") or {}).get("causes") or []
    return str(status.get("message", "")), [c for c in causes if isinstance(c, dict)]


#: `policyv1.DisruptionBudgetCause`: the cause kube-apiserver's eviction handler puts on every PDB
#: refusal (pkg/registry/core/pod/storage/eviction.go, `checkAndDecrement` and
#: `createTooManyRequestsError`); a StatusCause's `Type` is `reason` in JSON.
DISRUPTION_BUDGET_CAUSE = "DisruptionBudget"


def is_pdb_refusal(body: bytes) -> bool:
    """An eviction's 429 from a PodDisruptionBudget, as opposed to API throttling: by the Status
    cause alone (decisions read types, never message text)."""
    _, causes = status_message(body)
    return any(c.get("reason") == DISRUPTION_BUDGET_CAUSE for c in causes)


def retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("Retry-After")
    try:
        return min(float(value), 2.0) if value is not None else None
    except ValueError:
        return None


def exec_exit_code(status_channel: str) -> int | None:
    """The exit code in an exec's status channel: the API server's JSON `Status` (Success, or a
    NonZeroExitCode failure whose ExitCode cause is the code). None: the command gave none. Read
    as JSON here, where the client's own `returncode` runs a YAML parser over it."""
    try:
        status = json.loads(status_channel or "{}")
    except ValueError:
        return None
    if not isinstance(status, dict):
        return None
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    code = next((c.get("message") for c in causes if isinstance(c, dict) and c.get("reason") == "ExitCode"), None)
    try:
        return None if code is None else int(code)
    except ValueError:
        return None
