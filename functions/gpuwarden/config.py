"""Settings from the environment: the only reader of os.environ (docs/policy.md)."""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from gpuwarden.domain.errors import InvalidPolicy, InvalidSetting, PolicyNotFound
from gpuwarden.domain.policy import Policy, validation_problems


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    kubeconfig: str | None = None
    policy_file: str | None = None
    policy_parameter: str | None = None
    state_table: str | None = None
    now: datetime | None = None
    dry_run: bool = False
    region: str | None = None
    cluster: str | None = None
    drain_state_machine_arn: str | None = None
    #: One-time maintenance schedules: the group, the scheduled function they invoke, the role they use.
    schedule_group: str | None = None
    windows_function_arn: str | None = None
    scheduler_role_arn: str | None = None
    scheduler_dead_letter_arn: str | None = None
    kube_qps: float = 50.0
    kube_burst: int = 100
    #: GPU-idle alarm name prefixes the deployed rules take (besides gpuwarden's own), comma-separated.
    gpu_idle_alarm_prefixes: str | None = None

    #: GPUWARDEN_MODE=observe (`cdk deploy -c mode=observe`): plan, report, record and post
    #: "Would…" Events; write nothing else to the cluster or to EC2 (implies dry_run).
    observe: bool = False
    #: Inside Lambda (AWS_LAMBDA_FUNCTION_NAME set): no policy at all is then a failure.
    deployed: bool = False

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Every variable parsed strictly (docs/policy.md): a value gpuwarden does not
        understand raises InvalidSetting naming the variable and what it accepts (fail closed)."""
        env = os.environ if env is None else env

        def text(name: str) -> str | None:
            return env.get(name, "").strip() or None

        observe = parse_mode(env.get("GPUWARDEN_MODE")) == "observe"

        return cls(
            kubeconfig=text("KUBECONFIG") or (None if text("AWS_LAMBDA_FUNCTION_NAME") else home_kubeconfig(env)),
            policy_file=text("GPUWARDEN_POLICY_FILE"),
            policy_parameter=text("GPUWARDEN_POLICY_PARAMETER"),
            state_table=text("GPUWARDEN_STATE_TABLE"),
            now=parse_now(env.get("GPUWARDEN_NOW")),
            dry_run=parse_switch("DRY_RUN", env.get("DRY_RUN")) or observe,
            observe=observe,
            region=text("AWS_REGION") or text("AWS_DEFAULT_REGION"),
            cluster=text("GPUWARDEN_CLUSTER"),
            drain_state_machine_arn=text("GPUWARDEN_DRAIN_STATE_MACHINE_ARN"),
            schedule_group=text("GPUWARDEN_SCHEDULE_GROUP"),
            windows_function_arn=text("GPUWARDEN_WINDOWS_FUNCTION_ARN"),
            scheduler_role_arn=text("GPUWARDEN_SCHEDULER_ROLE_ARN"),
            scheduler_dead_letter_arn=text("GPUWARDEN_SCHEDULER_DLQ_ARN"),
            kube_qps=parse_number("GPUWARDEN_KUBE_QPS", env.get("GPUWARDEN_KUBE_QPS"), 50.0, float),
            kube_burst=int(parse_number("GPUWARDEN_KUBE_BURST", env.get("GPUWARDEN_KUBE_BURST"), 100, int)),
            gpu_idle_alarm_prefixes=text("GPUWARDEN_GPU_IDLE_ALARM_PREFIXES"),
            deployed=bool(text("AWS_LAMBDA_FUNCTION_NAME")),
        )


TRUE_VALUES = ("1", "true", "yes")
FALSE_VALUES = ("", "0", "false", "no")


def parse_switch(name: str, value: str | None) -> bool:
    """true/1/yes or false/0/no/unset (any case); anything else refuses to run."""
    word = (value or "").strip().lower()
    if word in TRUE_VALUES:
        return True
    if word in FALSE_VALUES:
        return False
    accepted = ", ".join(v for v in TRUE_VALUES + FALSE_VALUES if v)
    raise InvalidSetting(name, f"{value!r} is not understood; accepted: {accepted} (or unset)")


MODES = ("act", "observe")


def parse_mode(value: str | None) -> str:
    """act (default) or observe, exactly (any case); anything else refuses to run."""
    word = (value or "act").strip().lower() or "act"
    if word not in MODES:
        raise InvalidSetting("GPUWARDEN_MODE", f"{value!r} is not understood; accepted: {', '.join(MODES)}")
    return word


def parse_now(value: str | None) -> datetime | None:
    """RFC 3339 with a UTC offset (2026-06-01T09:30:00+09:00 or ...Z); unset: the real clock."""
    if value is None or not value.strip():
        return None
    try:
        parsed = datetime.fromisoformat(value.strip().replace("z", "Z"))
    except ValueError:
        parsed = None
    if parsed is None or "T" not in value.upper() or parsed.utcoffset() is None:
        raise InvalidSetting(
            "GPUWARDEN_NOW", f"{value!r} is not an RFC 3339 time with an offset (e.g. 2026-06-01T09:30:00Z)"
        )
    return parsed


def parse_number(name: str, value: str | None, default: float, kind: type[int] | type[float]) -> float:
    """A positive number of `kind` (int: a whole number); unset: `default`."""
    if value is None or not value.strip():
        return default
    try:
        number: float | None = kind(value.strip())
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or number <= 0:  # nan, inf, 0, -1 are no rate
        what = "a positive whole number" if kind is int else "a positive number"
        raise InvalidSetting(name, f"{value!r} is not {what}")
    return number


def parse_policy(text: str, source: str) -> Policy:
    """YAML or JSON (JSON is YAML); an error naming the source, and one line per problem: the key's
    path, what was given, what is allowed, "did you mean" for a misspelled key (docs/policy.md)."""
    import yaml

    try:
        document: Any = yaml.safe_load(text)
    except yaml.YAMLError as err:
        problem = " ".join(str(err).split())
        raise InvalidPolicy(f"{source} is not YAML or JSON: {problem}", source=source, problems=(problem,)) from None
    if not isinstance(document, dict):
        problem = f"a policy is a mapping of keys (cluster: …), not {type(document).__name__}"
        raise InvalidPolicy(f"{source} does not validate: {problem}", source=source, problems=(problem,))
    from gpuwarden.kinds.registry import POLICY  # with the sections the kinds add (gpuwarden/kinds/)

    try:
        return POLICY.model_validate(document)
    except ValidationError as err:
        problems = validation_problems(err, POLICY)
        raise InvalidPolicy(
            f"{source} does not validate: {'; '.join(problems)}", source=source, problems=problems
        ) from None


def home_kubeconfig(env: Mapping[str, str]) -> str | None:
    """`~/.kube/config` when it exists: where kubectl looks when KUBECONFIG is unset (a deployed
    function has none, and reaches EKS with its role: docs/cli.md#the-right-cluster)."""
    home = env.get("HOME")
    path = Path(home) / ".kube" / "config" if home else None
    return str(path) if path is not None and path.is_file() else None


def load_policy(settings: Settings) -> Policy:
    if settings.policy_file:
        path = Path(settings.policy_file)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise PolicyNotFound(f"policy file {path} not found (GPUWARDEN_POLICY_FILE)", source=str(path)) from None
        except OSError as err:
            raise InvalidPolicy(
                f"policy file {path} cannot be read: {err.strerror} (GPUWARDEN_POLICY_FILE)", source=str(path)
            ) from None
        return parse_policy(text, str(path))
    if settings.policy_parameter:
        return parse_policy(_parameter(settings.policy_parameter), f"SSM parameter {settings.policy_parameter}")
    if settings.deployed:
        raise InvalidSetting(
            "GPUWARDEN_POLICY_PARAMETER", "no policy: set GPUWARDEN_POLICY_PARAMETER (or GPUWARDEN_POLICY_FILE)"
        )
    from gpuwarden.kinds.registry import POLICY  # every kind's section at its defaults (gpuwarden/kinds/)

    policy = POLICY(cluster=settings.cluster or "default")
    if not _warned:
        _warned.append(True)
        sys.stderr.write(default_policy_warning(policy) + "\n")
    return policy


_warned: list[bool] = []  # the no-policy warning, once per process


def default_policy_warning(policy: Policy) -> str:
    return (
        "gpuwarden: no policy (GPUWARDEN_POLICY_FILE / GPUWARDEN_POLICY_PARAMETER unset): using the defaults, "
        f"cluster {policy.cluster!r} (GPUWARDEN_CLUSTER), no budget windows, every behaviour at its documented "
        "default (docs/policy.md)"
    )


#: How long a warm process keeps a policy parameter's value before reading it again
PARAMETER_MAX_AGE_SECONDS = 300.0
_parameters: dict[str, tuple[float, str]] = {}  # name -> (monotonic time read, value)


def _parameter(name: str) -> str:
    """The policy's SSM parameter, cached 5 minutes; an SDK failure is a typed error. Read with
    `adapters/sdk.py`'s client, not Powertools' Parameters: importing that imports
    boto3, ~0.1 s of every cold start (docs/benchmarks.md, "Cold start")."""
    from gpuwarden.adapters.errors import aws_call
    from gpuwarden.adapters.sdk import client

    now = time.monotonic()
    cached = _parameters.get(name)
    if cached is not None and now - cached[0] < PARAMETER_MAX_AGE_SECONDS:
        return cached[1]
    with aws_call(f"SSM GetParameter {name}"):
        value = str(client("ssm").get_parameter(Name=name)["Parameter"]["Value"])
    _parameters[name] = (now, value)
    return value


def policy_json(policy: Policy) -> str:
    return json.dumps(policy.model_dump(mode="json"), sort_keys=True)
