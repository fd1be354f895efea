"""Settings from the environment: the only reader of os.environ (docs/policy.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from dateutil.parser import isoparse
from pydantic import BaseModel, ConfigDict, ValidationError

from gpuwarden.domain.errors import CloudError, InvalidPolicy
from gpuwarden.domain.policy import Policy


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
    #: One-time maintenance schedules: the group, the windows function they invoke, the role they use.
    schedule_group: str | None = None
    windows_function_arn: str | None = None
    scheduler_role_arn: str | None = None
    scheduler_dead_letter_arn: str | None = None
    kube_qps: float = 50.0
    kube_burst: int = 100
    #: GPU-idle alarm name prefixes the deployed rules take (besides gpuwarden's own), comma-separated.
    gpu_idle_alarm_prefixes: str | None = None

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        now = env.get("GPUWARDEN_NOW")
        return cls(
            kubeconfig=env.get("KUBECONFIG") or None,
            policy_file=env.get("GPUWARDEN_POLICY_FILE") or None,
            policy_parameter=env.get("GPUWARDEN_POLICY_PARAMETER") or None,
            state_table=env.get("GPUWARDEN_STATE_TABLE") or None,
            now=isoparse(now) if now else None,
            dry_run=env.get("DRY_RUN", "").strip().lower() in ("1", "true", "yes"),
            region=env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None,
            cluster=env.get("GPUWARDEN_CLUSTER") or None,
            drain_state_machine_arn=env.get("GPUWARDEN_DRAIN_STATE_MACHINE_ARN") or None,
            schedule_group=env.get("GPUWARDEN_SCHEDULE_GROUP") or None,
            windows_function_arn=env.get("GPUWARDEN_WINDOWS_FUNCTION_ARN") or None,
            scheduler_role_arn=env.get("GPUWARDEN_SCHEDULER_ROLE_ARN") or None,
            scheduler_dead_letter_arn=env.get("GPUWARDEN_SCHEDULER_DLQ_ARN") or None,
            kube_qps=float(env.get("GPUWARDEN_KUBE_QPS", "50")),
            kube_burst=int(env.get("GPUWARDEN_KUBE_BURST", "100")),
            gpu_idle_alarm_prefixes=env.get("GPUWARDEN_GPU_IDLE_ALARM_PREFIXES") or None,
        )


def parse_policy(text: str, source: str) -> Policy:
    """YAML or JSON (JSON is YAML); a clear error naming the source and the field."""
    import yaml

    try:
        document: Any = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise InvalidPolicy(f"{source}: not YAML/JSON: {err}") from err
    if not isinstance(document, dict):
        raise InvalidPolicy(f"{source}: the policy must be a mapping, not {type(document).__name__}")
    try:
        return Policy.model_validate(document)
    except ValidationError as err:
        raise InvalidPolicy(f"{source}: {err}") from err


def load_policy(settings: Settings) -> Policy:
    if settings.policy_file:
        path = Path(settings.policy_file)
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise InvalidPolicy(f"GPUWARDEN_POLICY_FILE {path}: {err.strerror}") from err
        return parse_policy(text, str(path))
    if settings.policy_parameter:
        return parse_policy(_parameter(settings.policy_parameter), f"SSM parameter {settings.policy_parameter}")
    return Policy(cluster=settings.cluster or "default")


def _parameter(name: str) -> str:
    """The policy's SSM parameter (Powertools, cached 5 minutes); an SDK failure is a typed error."""
    from aws_lambda_powertools.utilities.parameters import get_parameter
    from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError
    from botocore.exceptions import BotoCoreError, ClientError

    from gpuwarden.adapters.errors import aws_error

    call = f"SSM GetParameter {name}"
    try:
        return str(get_parameter(name, max_age=300))
    except (BotoCoreError, ClientError) as err:
        raise aws_error(err, call) from err
    except GetParameterError as err:
        cause = err.__cause__ or err.__context__
        if isinstance(cause, BotoCoreError | ClientError):
            raise aws_error(cause, call) from err
        raise CloudError(f"{call}: {err}") from err


def policy_json(policy: Policy) -> str:
    return json.dumps(policy.model_dump(mode="json"), sort_keys=True)
