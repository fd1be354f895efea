"""Pod priority admission, as the API server's `Priority` admission plugin does it.

A pod names a PriorityClass (``spec.priorityClassName``); admission writes the class's value to
``spec.priority`` (and its ``preemptionPolicy``). With no class named, the cluster's
``globalDefault`` class applies, else priority 0. A pod may not bring its own ``spec.priority``
unless it equals what admission computes, and a class that does not exist is refused (403).
The two system classes exist in every cluster.
"""

from __future__ import annotations

from typing import Any

from sim.apiserver import errors

Obj = dict[str, Any]

#: Created by every API server at start-up (pkg/apis/scheduling: SystemPriorityClasses).
SYSTEM_CLASSES = {"system-node-critical": 2000001000, "system-cluster-critical": 2000000000}
_DEFAULT_PREEMPTION = "PreemptLowerPriority"


def _forbidden(pod: Obj, why: str) -> errors.ApiError:
    name = (pod.get("metadata") or {}).get("name") or ""
    return errors.ApiError(403, f'pods "{name}" is forbidden: {why}', "Forbidden", {"name": name, "kind": "pods"})


def _resolve(pod: Obj, classes: list[Obj]) -> tuple[int, str]:
    wanted = (pod.get("spec") or {}).get("priorityClassName") or ""
    if not wanted:
        default = next((c for c in classes if c.get("globalDefault")), None)
        if default is None:
            return 0, _DEFAULT_PREEMPTION
        return int(default.get("value", 0)), str(default.get("preemptionPolicy") or _DEFAULT_PREEMPTION)
    if wanted in SYSTEM_CLASSES:
        return SYSTEM_CLASSES[wanted], _DEFAULT_PREEMPTION
    found = next((c for c in classes if c["metadata"]["name"] == wanted), None)
    if found is None:
        raise _forbidden(pod, f"no PriorityClass with name {wanted} was found")
    return int(found.get("value", 0)), str(found.get("preemptionPolicy") or _DEFAULT_PREEMPTION)


def admit_pod(pod: Obj, classes: list[Obj]) -> None:
    """Set ``spec.priority`` / ``spec.preemptionPolicy`` on a pod being created, or refuse it."""
    spec = pod.setdefault("spec", {})
    priority, preemption = _resolve(pod, classes)
    given = spec.get("priority")
    if given is not None and int(given) != priority:
        raise _forbidden(
            pod,
            f"the integer value of priority ({given}) must not be provided in pod spec; priority admission "
            f"controller computed {priority} from the given PriorityClass name",
        )
    spec["priority"] = priority
    spec.setdefault("preemptionPolicy", preemption)
