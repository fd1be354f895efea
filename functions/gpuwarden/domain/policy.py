"""The policy document (docs/policy.md), validated once, frozen everywhere."""

from __future__ import annotations

import difflib
import functools
import re
import types
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Any, Literal, TypeVar, Union, cast, get_args, get_origin

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, create_model

from gpuwarden.domain.windows import Windows, parse_duration


class Frozen(BaseModel):
    """What every section of the policy is: frozen, and refusing a key it does not know (fail closed)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class ReplacementPolicy(Frozen):
    enabled: bool = True
    fleet_launch_template: str | None = None
    fleet_instance_types: list[str] = Field(default_factory=list)
    fleet_subnets: list[str] = Field(default_factory=list)
    #: Keep a new replacement NodeClaim from consolidation (karpenter.sh/do-not-disrupt) until its
    #: pods run on it, or this long at most (docs/cluster.md, "Replacement capacity").
    hold_minutes: int = Field(default=15, ge=1, le=24 * 60)
    #: Launches per interrupted node, when one fails to launch (the next option each time).
    attempts: int = Field(default=3, ge=1, le=10)


class CheckpointPolicy(Frozen):
    default_timeout_seconds: int = Field(default=60, ge=1, le=3600)
    allow_exec: bool = True


class DrainPolicy(Frozen):
    #: Longest backoff between rounds of evictions blocked by a PodDisruptionBudget.
    max_backoff_seconds: float = Field(default=5.0, gt=0, le=60)
    #: Voluntary drains (maintenance, manual) give up after this long.
    voluntary_limit_seconds: int = Field(default=3600, ge=60)


_LABEL_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_LABEL_KEY = rf"(?:[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*/)?{_LABEL_NAME}"
_LABEL_VALUE = rf"(?:{_LABEL_NAME})?"
_SELECTOR_TERM = re.compile(rf"!?{_LABEL_KEY}|{_LABEL_KEY}\s*(?:==|!=|=)\s*{_LABEL_VALUE}")


def _node_selector(value: str) -> str:
    """Equality-based label selector terms, comma-joined: ``k``, ``!k``, ``k=v``, ``k==v``, ``k!=v``
    (what the scan passes to the node LIST and what doctor evaluates); empty: every node."""
    for term in (t.strip() for t in value.split(",")):
        if value.strip() and not _SELECTOR_TERM.fullmatch(term):
            raise ValueError(
                f"invalid node selector term {term!r}: use label keys and values as k, !k, k=v or k!=v, comma-joined "
                "(set-based terms such as 'k in (a,b)' are not read)"
            )
    return value.strip()


def _duration(value: object) -> object:
    """``"10m"``-style text (the windows' duration form) → timedelta; anything else is refused."""
    if isinstance(value, str):
        return parse_duration(value)
    if isinstance(value, timedelta):
        return value
    raise ValueError(f"invalid duration {value!r}: expected text such as '10m' or '1h30m'")


Duration = Annotated[timedelta, BeforeValidator(_duration)]


class GpuHealthPolicy(Frozen):
    """The GPU-health scan and the gpu-unhealthy kind (docs/gpu-signals.md)."""

    enabled: bool = True
    #: Narrows the scan's one LIST of nodes (docs/gpu-signals.md); empty: every accelerator node.
    node_selector: Annotated[str, AfterValidator(_node_selector)] = Field(default="", max_length=256)
    #: When Karpenter's node repair / EKS auto repair replace an unhealthy node (both: 10 min).
    repair_after: Duration = timedelta(minutes=10)
    #: A broken DCGM must not drain a whole NodePool (Karpenter's own repair stops above 20 %).
    max_unhealthy_percent: float = Field(default=20.0, ge=0, le=100)


#: The kinds an Alertmanager alert may be mapped to (docs/gpu-signals.md).
AlertKind = Literal["gpu-idle", "gpu-unhealthy"]


class Policy(Frozen):
    cluster: str = Field(min_length=1, max_length=100)
    windows: Windows = Field(default_factory=list)
    replacement: ReplacementPolicy = ReplacementPolicy()
    checkpoint: CheckpointPolicy = CheckpointPolicy()
    drain: DrainPolicy = DrainPolicy()
    gpu_health: GpuHealthPolicy = GpuHealthPolicy()
    #: Alertmanager alert name → the kind its firing alerts are.
    alerts: dict[Annotated[str, Field(min_length=1, max_length=256)], AlertKind] = Field(default_factory=dict)


# --------------------------------------------------------------------------- errors a person can act on


def validation_problems(err: ValidationError, model: type[BaseModel] = Policy) -> tuple[str, ...]:
    """One line per error of a document validated by ``model`` (docs/policy.md, "When the policy
    does not validate"): the key's dotted path, what was given and what is allowed, and for a key
    the model does not know, the closest one it does ("did you mean"). No library URLs."""
    return tuple(_problem(e, model) for e in err.errors(include_url=False))


def _problem(error: Mapping[str, Any], model: type[BaseModel]) -> str:
    loc = tuple(error.get("loc") or ())
    path = ".".join(str(step) for step in loc) or "(the document)"
    given = _shown(error.get("input"))
    kind = error["type"]
    if kind == "extra_forbidden":
        names = list(_fields_at(model, loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
        hint = f": did you mean `{close[0]}`?" if close else "."
        return f"{path}: unknown key (given {given}){hint} Allowed here: {', '.join(names)}"
    if kind == "missing":
        return f"{path}: required, not given"
    if kind in ("value_error", "assertion_error"):  # the validator's own words, which name the value
        return f"{path}: {_allowed(error)}"
    return f"{path}: given {given}; allowed: {_allowed(error)}"


_ALLOWED_BY_TYPE = {
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "int_parsing": "a whole number",
    "int_type": "a whole number",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "string_type": "text",
    "dict_type": "a mapping of keys",
    "model_type": "a mapping of keys",
    "model_attributes_type": "a mapping of keys",
    "list_type": "a list",
}


_BOUNDS = {"greater_than": "more than", "greater_than_equal": "at least", "less_than": "less than"}
_BOUNDS |= {"less_than_equal": "at most", "multiple_of": "a multiple of"}
_BOUND_KEYS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le"}
_BOUND_KEYS |= {"multiple_of": "multiple_of"}


def _allowed(error: Mapping[str, Any]) -> str:
    """What is allowed, from the error's type and context (never by parsing its message)."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    if kind in _ALLOWED_BY_TYPE:
        return _ALLOWED_BY_TYPE[kind]
    if kind == "literal_error":
        return str(ctx.get("expected", ""))
    if kind in ("value_error", "assertion_error"):  # the validator's own words
        return str(ctx.get("error", ""))
    if kind in ("string_too_short", "string_too_long"):
        most = "at least" if kind == "string_too_short" else "at most"
        count = ctx.get("min_length" if kind == "string_too_short" else "max_length")
        return f"text of {most} {count} character{'s' if count != 1 else ''}"
    bound = ctx.get(_BOUND_KEYS.get(kind, ""))
    if bound is not None:
        return f"{_BOUNDS[kind]} {bound:g}" if isinstance(bound, int | float) else f"{_BOUNDS[kind]} {bound}"
    text = str(error.get("msg", ""))
    return text[:1].lower() + text[1:]


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _fields_at(model: type[BaseModel], path: Sequence[object]) -> dict[str, Any]:
    """The fields of the model found at ``path`` inside ``model`` (list indexes and mapping keys
    stepped through); empty when the path leads to no model."""
    current: Any = model
    for step in path:
        current = _inner(current, step)
    found = _as_model(current)
    return dict(found.model_fields) if found is not None else {}


def _inner(annotation: Any, step: object) -> Any:
    found = _as_model(annotation)
    if found is not None:
        field = found.model_fields.get(str(step))
        return field.annotation if field is not None else None
    container = _unwrapped(annotation)
    origin, args = get_origin(container), get_args(container)
    if isinstance(origin, type) and issubclass(origin, Mapping) and len(args) == 2:
        return args[1]
    if isinstance(origin, type) and issubclass(origin, Sequence | set | frozenset) and args:
        return args[0]
    return None


def _unwrapped(annotation: Any) -> Any:
    """Annotated[X, ...] -> X; X | None -> X."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, types.UnionType):
        rest = [a for a in get_args(annotation) if a is not type(None)]
        annotation = rest[0] if len(rest) == 1 else annotation
    return annotation


def _as_model(annotation: Any) -> type[BaseModel] | None:
    annotation = _unwrapped(annotation)
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


# --------------------------------------------------------------------------- the kinds' sections


Section = TypeVar("Section", bound=BaseModel)


def with_sections(sections: Mapping[str, type[BaseModel]], order: Sequence[str] = ()) -> type[Policy]:
    """The policy model with the sections the kinds add (their spec's ``policy``: gpuwarden/kinds/),
    each at its model's defaults when the document leaves it out; unknown keys are still refused.
    ``order``: the document's keys in the order its errors, its "Allowed here" and its schema list
    them (a key not named there comes after those named, in the order given)."""
    clash = sorted(set(sections) & set(Policy.model_fields))
    if clash:
        raise TypeError(f"a kind's policy section takes a key the policy already has: {', '.join(clash)}")
    models = list(sections.values())
    twice = sorted({m.__name__ for m in models if models.count(m) > 1})
    if twice:  # `section_of` finds a section by its model
        raise TypeError(f"two policy sections share a model: {', '.join(twice)}")
    if not sections:
        return Policy
    fields: dict[str, object] = {key: (model, model()) for key, model in sections.items()}
    composed = cast("type[Policy]", create_model("Policy", __base__=Policy, **fields))  # type: ignore[call-overload]
    rank = {key: i for i, key in enumerate(order)}
    # pydantic puts a base's fields first; the document's order is set here, then the model rebuilt
    # from it (its validation reports errors in that order: tests/unit/test_policy_sections.py)
    composed.__pydantic_fields__ = dict(
        sorted(composed.__pydantic_fields__.items(), key=lambda item: rank.get(item[0], len(rank)))
    )
    composed.model_rebuild(force=True)
    return composed


def section_of(policy: Policy, model: type[Section]) -> Section:
    """A kind's own section of ``policy``, found by its model (the kind's spec names its key:
    `KindSpec.policy`, gpuwarden/kinds/): the one way the code reads a kind's section (a test keeps
    it so). The model's defaults where the policy model has no such section (`Policy` itself, not
    the document's model: nothing a user wrote can be lost, since `Policy` refuses a key it does
    not know)."""
    key = _key_of(type(policy), model)
    value = getattr(policy, key) if key is not None else None
    return value if isinstance(value, model) else model()


@functools.cache
def _key_of(policy_model: type[Policy], model: type[BaseModel]) -> str | None:
    """The key of the section whose model is ``model`` (None: the policy model has none)."""
    return next((key for key, field in policy_model.model_fields.items() if field.annotation is model), None)
