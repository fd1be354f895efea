"""Admission of Karpenter's v1 objects as kube-apiserver does it with Karpenter's CRDs installed.

Written from ``kubernetes-sigs/karpenter`` ``pkg/apis/crds/karpenter.sh_nodepools.yaml`` and
``karpenter.sh_nodeclaims.yaml`` (v1): the openAPI schema's defaults, types, patterns, enums,
required fields, bounds and ``maxItems``, and every ``x-kubernetes-validations`` CEL rule (as a
Python predicate beside its message, with transition rules given the old object). After a
create, update or patch has been applied, ``admit`` fills the defaults into the object (as the
API server stores them) and answers 422 ``Invalid`` naming each field, as the real server does
(the checking itself is ``crd_schema``'s).

Not modelled: pruning of unknown fields, ``format: date-time``, the status schemas.
"""

from __future__ import annotations

import re
from typing import Any

from sim.apiserver.crd_schema import Obj, Rule, S, admit_with

GROUP = "karpenter.sh"
_QUANTITY = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
_QUALIFIED = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*(\/))?([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$"
)
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
_EXPIRE = r"^(([0-9]+(s|m|h))+|Never)$"
_GRACE = r"^([0-9]+(s|m|h))+$"
_BUDGET_NODES = r"^((100|[0-9]{1,2})%|[0-9]+)$"
_BUDGET_DURATION = r"^((([0-9]+(h|m))|([0-9]+h[0-9]+m))(0s)?)$"
_BUDGET_SCHEDULE = r"^(@(annually|yearly|monthly|weekly|daily|midnight|hourly))|((.+)\s(.+)\s(.+)\s(.+)\s(.+))$"
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Gte", "Lte")
_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


# ----------------------------------------------------------------------------- CEL rules


def _cel_find_domain(key: str) -> str:
    match = re.search(r"^([^/]+)", key)
    return match.group(0) if match else ""


def _not_karpenter_domain(key: str) -> bool:
    return key in ("karpenter.sh/capacity-type", "karpenter.sh/nodepool") or not _cel_find_domain(key).endswith(
        "karpenter.sh"
    )


def _cel_int(value: Any) -> int:
    if not isinstance(value, str) or not re.fullmatch(r"[+-]?[0-9]+", value):
        raise ValueError(value)
    return int(value)


def _range_operator_ok(r: Obj) -> bool:
    if r.get("operator") not in ("Gt", "Lt", "Gte", "Lte"):
        return True
    values = r.get("values") or []
    try:
        return len(values) == 1 and _cel_int(values[0]) >= 0
    except ValueError:
        return False


def _min_values_ok(r: Obj) -> bool:
    if r.get("operator") != "In" or "minValues" not in r:
        return True
    minimum = r["minValues"]
    return not isinstance(minimum, int) or len(r.get("values") or []) >= minimum


_DOMAIN_RULE = Rule('label domain "karpenter.sh" is restricted', _not_karpenter_domain)
_NODEPOOL_LABEL_RULE = Rule('label "karpenter.sh/nodepool" is restricted', lambda k: k != "karpenter.sh/nodepool")
_HOSTNAME_RULE = Rule('label "kubernetes.io/hostname" is restricted', lambda k: k != "kubernetes.io/hostname")
_REQUIREMENTS_RULES = (
    Rule(
        "requirements with operator 'In' must have a value defined",
        lambda rs: all(len(r.get("values") or []) != 0 for r in rs if r.get("operator") == "In"),
    ),
    Rule(
        "requirements operator 'Gt', 'Lt', 'Gte', or 'Lte' must have a single positive integer value",
        lambda rs: all(_range_operator_ok(r) for r in rs),
    ),
    Rule(
        "requirements with 'minValues' must have at least that many values specified in the 'values' field",
        lambda rs: all(_min_values_ok(r) for r in rs),
    ),
)


def _not_empty(what: str) -> Rule:
    return Rule(f"{what} may not be empty", lambda v: v != "")


def _immutable(what: str, key: str) -> Rule:
    return Rule(f"nodeClassRef.{what} is immutable", lambda new, old: new.get(key) == old.get(key), transition=True)


def _static_limits_ok(spec: Obj) -> bool:
    limits = spec.get("limits")
    return "replicas" not in spec or not limits or (len(limits) == 1 and "nodes" in limits)


# ------------------------------------------------------------------------------- schemas

_STRING, _INT = S(type="string"), S(type="integer")


def _taints() -> S:
    taint = S(
        type="object",
        required=("effect", "key"),
        properties={
            "effect": S(type="string", enum=_EFFECTS),
            "key": S(type="string", min_length=1, pattern=_QUALIFIED),
            "timeAdded": _STRING,
            "value": S(type="string", pattern=_QUALIFIED),
        },
    )
    return S(type="array", items=taint)


def _requirements(key_rules: tuple[Rule, ...]) -> S:
    requirement = S(
        type="object",
        required=("key", "operator"),
        properties={
            "key": S(type="string", max_length=316, pattern=_QUALIFIED, rules=key_rules),
            "minValues": S(type="integer", minimum=1, maximum=50),
            "operator": S(type="string", enum=_OPERATORS),
            "values": S(type="array", items=_STRING),
        },
    )
    return S(type="array", items=requirement, max_items=100, rules=_REQUIREMENTS_RULES)


def _node_class_ref() -> S:
    return S(
        type="object",
        required=("group", "kind", "name"),
        properties={
            "group": S(type="string", pattern=r"^[^/]*$", rules=(_not_empty("group"),)),
            "kind": S(type="string", rules=(_not_empty("kind"),)),
            "name": S(type="string", rules=(_not_empty("name"),)),
        },
        rules=(_immutable("group", "group"), _immutable("kind", "kind")),
    )


def _claim_spec_properties(key_rules: tuple[Rule, ...]) -> dict[str, S]:
    return {
        "expireAfter": S(type="string", pattern=_EXPIRE, default="720h"),
        "nodeClassRef": _node_class_ref(),
        "requirements": _requirements(key_rules),
        "startupTaints": _taints(),
        "taints": _taints(),
        "terminationGracePeriod": S(type="string", pattern=_GRACE),
    }


_BUDGET = S(
    type="object",
    required=("nodes",),
    properties={
        "duration": S(type="string", pattern=_BUDGET_DURATION),
        "nodes": S(type="string", pattern=_BUDGET_NODES, default="10%"),
        "reasons": S(
            type="array",
            items=S(type="string", enum=("Underutilized", "Empty", "Drifted")),
            max_items=50,
            list_set=True,
        ),
        "schedule": S(type="string", pattern=_BUDGET_SCHEDULE),
    },
)

NODEPOOL = S(
    type="object",
    required=("spec",),
    properties={
        "spec": S(
            type="object",
            required=("template",),
            properties={
                "disruption": S(
                    type="object",
                    default={"consolidateAfter": "0s"},
                    properties={
                        "budgets": S(
                            type="array",
                            items=_BUDGET,
                            max_items=50,
                            default=[{"nodes": "10%"}],
                            rules=(
                                Rule(
                                    "'schedule' must be set with 'duration'",
                                    lambda bs: all(("schedule" in b) == ("duration" in b) for b in bs),
                                ),
                            ),
                        ),
                        "consolidateAfter": S(type="string", pattern=_EXPIRE, default="0s"),
                        "consolidationPolicy": S(
                            type="string",
                            enum=("WhenEmpty", "WhenEmptyOrUnderutilized", "Balanced"),
                            default="WhenEmptyOrUnderutilized",
                        ),
                    },
                ),
                "limits": S(type="object", values=S(type="int-or-string", pattern=_QUANTITY)),
                "replicas": S(type="integer", minimum=0),
                "template": S(
                    type="object",
                    required=("spec",),
                    properties={
                        "metadata": S(
                            type="object",
                            properties={
                                "annotations": S(type="object", values=_STRING),
                                "labels": S(
                                    type="object",
                                    values=S(type="string", max_length=63, pattern=_LABEL_VALUE),
                                    max_properties=100,
                                    rules=(
                                        Rule(
                                            _DOMAIN_RULE.message, lambda ls: all(_not_karpenter_domain(k) for k in ls)
                                        ),
                                        Rule(
                                            _NODEPOOL_LABEL_RULE.message, lambda ls: "karpenter.sh/nodepool" not in ls
                                        ),
                                        Rule(_HOSTNAME_RULE.message, lambda ls: "kubernetes.io/hostname" not in ls),
                                    ),
                                ),
                            },
                        ),
                        "spec": S(
                            type="object",
                            required=("nodeClassRef", "requirements"),
                            properties=_claim_spec_properties((_DOMAIN_RULE, _NODEPOOL_LABEL_RULE, _HOSTNAME_RULE)),
                        ),
                    },
                ),
                "weight": S(type="integer", minimum=1, maximum=100),
            },
            rules=(
                Rule(
                    "Cannot transition NodePool between static (replicas set) and dynamic (replicas unset) "
                    "provisioning modes",
                    lambda new, old: ("replicas" in new) == ("replicas" in old),
                    transition=True,
                ),
                Rule("only 'limits.nodes' is supported on static NodePools", _static_limits_ok),
                Rule(
                    "'weight' is not supported on static NodePools", lambda s: "replicas" not in s or "weight" not in s
                ),
            ),
        ),
    },
)

NODECLAIM = S(
    type="object",
    required=("spec",),
    properties={
        "spec": S(
            type="object",
            required=("nodeClassRef", "requirements"),
            properties={
                **_claim_spec_properties((_DOMAIN_RULE, _HOSTNAME_RULE)),
                "resources": S(
                    type="object",
                    properties={"requests": S(type="object", values=S(type="int-or-string", pattern=_QUANTITY))},
                ),
            },
            rules=(Rule("spec is immutable", lambda new, old: new == old, transition=True),),
        ),
    },
)

SCHEMAS = {"NodePool": NODEPOOL, "NodeClaim": NODECLAIM}


def admit(kind: str, group: str, obj: Obj, old: Obj | None) -> None:
    """Default ``obj`` in place and validate it (``old``: the stored object, on update) as the
    API server does with Karpenter's v1 CRDs; raise 422 ``Invalid`` naming every bad field."""
    schema = SCHEMAS.get(kind) if group == GROUP else None
    if schema is not None:
        admit_with(schema, kind, group, obj, old)
