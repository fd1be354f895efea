"""PodDisruptionBudgets as the drain sees them: which budget guards a pod, and does it allow
an eviction now (pure; the API server decides for real, this only explains and predicts)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwarden.domain.predicates import requirement_matches
from gpuwarden.domain.views import NodeSelectorRequirement, PodView


@dataclass(frozen=True)
class PdbView:
    namespace: str
    name: str
    #: ``spec.selector``; None selects nothing, ``{}`` every pod of the namespace (policy/v1).
    selector: Mapping[str, Any] | None = None
    #: ``status.disruptionsAllowed``; None while the disruption controller has not computed it.
    disruptions_allowed: int | None = None

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def blocks(self) -> bool:
        """An eviction of a healthy pod it guards would be refused now (HTTP 429)."""
        return self.disruptions_allowed is not None and self.disruptions_allowed <= 0


def pdb_from_json(obj: Mapping[str, Any]) -> PdbView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    allowed = status.get("disruptionsAllowed")
    return PdbView(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        selector=spec.get("selector"),
        disruptions_allowed=int(allowed) if allowed is not None else None,
    )


def _expression_matches(expression: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A label selector's In / NotIn / Exists / DoesNotExist, as the scheduler's node-selector
    requirement (`predicates.requirement_matches`); Gt and Lt, which a label selector does not
    have, the API server would have rejected."""
    operator = str(expression.get("operator"))
    if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
        return False
    values = tuple(str(v) for v in expression.get("values") or ())
    return requirement_matches(NodeSelectorRequirement(str(expression.get("key", "")), operator, values), labels)


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics: matchLabels AND every matchExpression."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or ())


def pdbs_guarding(pod: PodView, pdbs: Iterable[PdbView]) -> list[PdbView]:
    return [p for p in pdbs if p.namespace == pod.namespace and selector_matches(p.selector, pod.labels)]


def blocking_pdb(pod: PodView, pdbs: Sequence[PdbView]) -> PdbView | None:
    """The budget that refuses this pod's eviction now, if any: none for a pod the Eviction API lets go
    without reading a budget (Pending, finished or terminating: `PodView.ignores_pdbs`)."""
    if pod.ignores_pdbs:
        return None
    return next((p for p in pdbs_guarding(pod, pdbs) if p.blocks), None)
