"""A CustomResourceDefinition's structural schema and CEL rules, checked as kube-apiserver checks
them on admission: defaults filled in, then types, patterns, enums, required fields, bounds,
``maxItems`` and every ``x-kubernetes-validations`` rule (a Python predicate beside its message;
transition rules are given the old object), each failure a cause of one 422 ``Invalid``:
``details.causes[]`` with ``reason`` (``FieldValueInvalid``, ``FieldValueRequired``,
``FieldValueNotSupported``, ``FieldValueTooMany``, ``FieldValueTypeInvalid``,
``FieldValueDuplicate``), ``field`` and ``message``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import errors

Obj = dict[str, Any]
Cause = tuple[str, str, str]  # (reason, field, message)


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


def admit_with(schema: S, kind: str, group: str, obj: Obj, old: Obj | None) -> None:
    """Default ``obj`` in place and validate it against ``schema`` (``old``: the stored object, on
    update) as the API server does; raise 422 ``Invalid`` naming every bad field."""
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
