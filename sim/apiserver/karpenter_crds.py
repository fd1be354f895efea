"""Admission of Karpenter's v1 objects as kube-apiserver does it with Karpenter's CRDs installed.

Written from ``kubernetes-sigs/karpenter`` ``pkg/apis/crds/karpenter.sh_nodepools.yaml`` and
``karpenter.sh_nodeclaims.yaml`` (v1): the openAPI schema's defaults, types, patterns, enums,
required fields, bounds and ``maxItems``, and every ``x-kubernetes-validations`` CEL rule (as a
Python predicate beside its message, with transition rules given the old object). After a
create, update or patch has been applied, ``admit`` fills the defaults into the object (as the
API server stores them) and answers 422 ``Invalid`` naming each field, as the real server does:
``details.causes[]`` with ``reason`` (``FieldValueInvalid``, ``FieldValueRequired``,
``FieldValueNotSupported``, ``FieldValueTooMany``, ``FieldValueTypeInvalid``,
``FieldValueDuplicate``), ``field`` and ``message``.

Not modelled: pruning of unknown fields, ``format: date-time``, the status schemas.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import errors

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (reason, field, message)

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


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry: ``check(self)`` or, for a transition rule,
    ``check(self, oldSelf)`` (evaluated only on update, where the old value exists)."""

    message: str
    check: Callable[..., bool]
    transition: bool = False


@dataclass(frozen=True)
class S:
    """The part of an openAPI v3 structural schema admission needs."""

    type: str = ""  # string | integer | object | array | int-or-string
    properties: dict[str, S] = field(default_factory=dict)
    items: S | None = None
    values: S | None = None  # additionalProperties
    required: tuple[str, ...] = ()
    pattern: str | None = None
    enum: tuple[str, ...] = ()
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    max_items: int | None = None
    max_properties: int | None = None
    list_set: bool = False
    default: Any = None
    rules: tuple[Rule, ...] = ()


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


# ------------------------------------------------------------------------ defaults, checks


def _apply_defaults(value: Any, schema: S) -> None:
    """Structural defaulting, top-down: nulls of known fields are pruned, then missing fields
    with a default get it (a defaulted object gets its own fields' defaults in turn)."""
    if isinstance(value, dict) and schema.type == "object":
        for name, sub in schema.properties.items():
            if name in value and value[name] is None:
                del value[name]
            if name not in value and sub.default is not None:
                value[name] = json.loads(json.dumps(sub.default))
            if name in value:
                _apply_defaults(value[name], sub)
        if schema.values is not None:
            for item in value.values():
                _apply_defaults(item, schema.values)
    elif isinstance(value, list) and schema.items is not None:
        for item in value:
            _apply_defaults(item, schema.items)


_JSON_TYPES: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "int-or-string": lambda v: isinstance(v, str) or (isinstance(v, int) and not isinstance(v, bool)),
}


def _type_name(value: Any) -> str:
    for kind, name in ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "array" if isinstance(value, list) else "null"


def _shown(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) else str(value)


def _scalar_causes(value: Any, schema: S, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if isinstance(value, str):
        if schema.enum and value not in schema.enum:
            supported = ", ".join(json.dumps(e) for e in schema.enum)
            causes.append(
                ("FieldValueNotSupported", path, f"Unsupported value: {_shown(value)}: supported values: {supported}")
            )
        if schema.max_length is not None and len(value) > schema.max_length:
            causes.append(("FieldValueTooLong", path, f"Too long: may not be more than {schema.max_length} bytes"))
        if schema.min_length is not None and len(value) < schema.min_length:
            message = f"{path} in body should be at least {schema.min_length} chars long"
            causes.append(("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {message}"))
        if schema.pattern is not None and not re.search(schema.pattern, value):
            message = f"{path} in body should match '{schema.pattern}'"
            causes.append(("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {message}"))
    elif isinstance(value, int):
        if schema.minimum is not None and value < schema.minimum:
            message = f"{path} in body should be greater than or equal to {schema.minimum}"
            causes.append(("FieldValueInvalid", path, f"Invalid value: {value}: {message}"))
        if schema.maximum is not None and value > schema.maximum:
            message = f"{path} in body should be less than or equal to {schema.maximum}"
            causes.append(("FieldValueInvalid", path, f"Invalid value: {value}: {message}"))
    return causes


def _array_causes(value: list[Any], schema: S, path: str) -> list[Cause]:
    causes: list[Cause] = []
    if schema.max_items is not None and len(value) > schema.max_items:
        causes.append(
            ("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {schema.max_items} items")
        )
    if schema.list_set:
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                causes.append(("FieldValueDuplicate", f"{path}[{i}]", f"Duplicate value: {_shown(item)}"))
            seen.append(item)
    if schema.items is not None:
        for i, item in enumerate(value):
            causes += _causes(item, schema.items, f"{path}[{i}]", None)  # atomic lists: no oldSelf
    return causes


def _object_causes(value: Obj, schema: S, path: str, old: Any) -> list[Cause]:
    prefix = f"{path}." if path else ""
    causes: list[Cause] = [
        ("FieldValueRequired", f"{prefix}{name}", "Required value") for name in schema.required if name not in value
    ]
    if schema.max_properties is not None and len(value) > schema.max_properties:
        causes.append(
            ("FieldValueTooMany", path, f"Too many: {len(value)}: must have at most {schema.max_properties} items")
        )
    olds = old if isinstance(old, dict) else {}
    for name, sub in schema.properties.items():
        if name in value:
            causes += _causes(value[name], sub, f"{prefix}{name}", olds.get(name))
    if schema.values is not None:
        for key, item in value.items():
            causes += _causes(item, schema.values, f"{path}[{key}]", None)
    return causes


def _rule_causes(value: Any, schema: S, path: str, old: Any) -> list[Cause]:
    causes: list[Cause] = []
    for rule in schema.rules:
        if rule.transition and old is None:
            continue
        try:
            ok = bool(rule.check(value, old) if rule.transition else rule.check(value))
        except (TypeError, AttributeError, KeyError, ValueError):
            ok = False
        if not ok:
            causes.append(
                ("FieldValueInvalid", path, f"Invalid value: {json.dumps(_type_name(value))}: {rule.message}")
            )
    return causes


def _causes(value: Any, schema: S, path: str, old: Any) -> list[Cause]:
    if schema.type and not _JSON_TYPES[schema.type](value):
        wanted = "integer,string" if schema.type == "int-or-string" else schema.type
        shown = json.dumps(_type_name(value))
        return [
            ("FieldValueTypeInvalid", path, f"Invalid value: {shown}: {path} in body must be of type {wanted}: {shown}")
        ]
    causes = _scalar_causes(value, schema, path)
    if isinstance(value, list):
        causes += _array_causes(value, schema, path)
    if isinstance(value, dict):
        causes += _object_causes(value, schema, path, old)
    return causes + _rule_causes(value, schema, path, old)


def admit(kind: str, group: str, obj: Obj, old: Obj | None) -> None:
    """Default ``obj`` in place and validate it (``old``: the stored object, on update) as the
    API server does with Karpenter's v1 CRDs; raise 422 ``Invalid`` naming every bad field."""
    schema = SCHEMAS.get(kind) if group == GROUP else None
    if schema is None:
        return
    _apply_defaults(obj, schema)
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")}
    causes = _causes(body, schema, "", old)
    if not causes:
        return
    name = str((obj.get("metadata") or {}).get("name") or "")
    text = [f"{f}: {m}" for _, f, m in causes]
    summary = text[0] if len(text) == 1 else "[" + ", ".join(text) + "]"
    raise errors.ApiError(
        422,
        f'{kind}.{group} "{name}" is invalid: {summary}',
        "Invalid",
        {
            "name": name,
            "group": group,
            "kind": kind,
            "causes": [{"reason": r, "message": m, "field": f} for r, f, m in causes],
        },
    )
