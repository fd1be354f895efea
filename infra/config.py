"""Deployment settings, read once from CDK context (cdk.json or ``-c key=value``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from constructs import Node

from gpuwarden.config import parse_policy
from gpuwarden.domain.errors import InvalidPolicy
from gpuwarden.domain.policy import Policy

DEFAULT_CLUSTER = "ml-prod"
ARCHITECTURES = ("x86_64", "arm64")

#: context key: one customer-managed KMS key for logs, table, queues and function settings
CUSTOMER_MANAGED_KEY = "customerManagedKey"
#: context key: the interruption function's reserved concurrency (docs/security.md; default 100)
INTERRUPTION_CONCURRENCY = "interruptionConcurrency"
DEFAULT_INTERRUPTION_CONCURRENCY = 100
#: context key that skips building the layer and the code asset (tests without a wheel cache)
SKIP_BUNDLING = "gpuwardenSkipBundling"

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # EKS cluster name rules
_IDS = {
    "vpcId": re.compile(r"^vpc-[0-9a-f]{8,17}$"),
    "subnetIds": re.compile(r"^subnet-[0-9a-f]{8,17}$"),
    "securityGroupIds": re.compile(r"^sg-[0-9a-f]{8,17}$"),
}
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
_TOPIC_ARN = re.compile(r"^arn:aws[a-z-]*:sns:[a-z0-9-]+:\d{12}:[\w-]{1,256}$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
REPO_ROOT = Path(__file__).resolve().parents[1]


class SettingsError(ValueError):
    """A context value is invalid; the message names the key."""


@dataclass(frozen=True)
class Network:
    """Lambda VPC placement (private cluster endpoints, the `http:` checkpoint mode)."""

    vpc_id: str
    subnet_ids: tuple[str, ...]
    #: empty: the stack creates one security group (all egress, no ingress)
    security_group_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class Settings:
    cluster: str = DEFAULT_CLUSTER
    lambda_architecture: str = "x86_64"
    #: the policy document (canonical JSON text) stored in the SSM parameter
    policy_json: str = ""
    #: the same document, validated by gpuwarden's own model at synth time
    policy: Policy = field(default_factory=lambda: Policy(cluster=DEFAULT_CLUSTER))
    #: SNS topic for alarm notifications (existing); alarms have no action when neither is set
    alarm_topic_arn: str = ""
    #: e-mail subscribed to the alarm topic (the stack creates the topic when no ARN is given)
    alarm_email: str = ""
    network: Network | None = None
    #: the role of the fleet launch template's instance profile (iam:PassRole for EC2 Fleet)
    fleet_role_arn: str = ""
    #: create the EKS access entries and apply the RBAC at deploy time
    cluster_access: bool = True
    #: encrypt logs, table, queues and function environments with a KMS key the stack creates
    customer_managed_key: bool = False
    #: one concurrent execution per node of the largest Spot burst to cordon at once
    interruption_concurrency: int = DEFAULT_INTERRUPTION_CONCURRENCY
    skip_bundling: bool = False
    #: `-c mode=observe`: every function plans, reports and records, and writes nothing to the
    #: cluster (but "Would…" Events) or to EC2 (docs/rollback.md#observe); `act` (default) acts
    mode: str = "act"
    #: the CloudFormation stack name: `-c stackName=…`, else `Gpuwarden-<cluster>` (one stack per cluster)
    stack_name: str = ""

    @classmethod
    def from_context(cls, node: Node) -> Settings:
        cluster = _str(node, "cluster", DEFAULT_CLUSTER)
        if not _CLUSTER_NAME.match(cluster):
            raise SettingsError(f"context 'cluster' is not a valid EKS cluster name: {cluster!r}")
        arch = _str(node, "lambdaArchitecture", "x86_64")
        if arch not in ARCHITECTURES:
            raise SettingsError(f"context 'lambdaArchitecture' must be one of {ARCHITECTURES}, got {arch!r}")
        policy_json, policy = _policy(node.try_get_context("policy"), _str(node, "policyFile", ""), cluster)
        return cls(
            cluster=cluster,
            lambda_architecture=arch,
            policy_json=policy_json,
            policy=policy,
            alarm_topic_arn=_matching(node, "alarmTopicArn", _TOPIC_ARN),
            alarm_email=_matching(node, "alarmEmail", _EMAIL),
            network=_network(node),
            fleet_role_arn=_matching(node, "fleetRoleArn", _ROLE_ARN),
            cluster_access=_bool(node.try_get_context("clusterAccess"), default=True, key="clusterAccess"),
            customer_managed_key=_bool(node.try_get_context(CUSTOMER_MANAGED_KEY), key=CUSTOMER_MANAGED_KEY),
            interruption_concurrency=_concurrency(node.try_get_context(INTERRUPTION_CONCURRENCY)),
            skip_bundling=_bool(node.try_get_context(SKIP_BUNDLING), key=SKIP_BUNDLING),
            mode=_choice(node, "mode", MODES, "act"),
            stack_name=_stack_name(node, cluster),
        )


MODES = ("act", "observe")
_STACK_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9-]{0,127}$")  # CloudFormation stack name rules


def _choice(node: Node, key: str, choices: tuple[str, ...], default: str) -> str:
    """One of ``choices`` exactly: anything else fails the synth naming the key and the choices."""
    value = _str(node, key, default)
    if value not in choices:
        raise SettingsError(f"context {key!r} must be one of {', '.join(choices)}, got {value!r}")
    return value


def _stack_name(node: Node, cluster: str) -> str:
    """`-c stackName=…`, else `Gpuwarden-<cluster>` (the cluster name with `_` made `-`)."""
    name = _str(node, "stackName", "") or f"Gpuwarden-{cluster.replace('_', '-')}"
    if not _STACK_NAME.match(name):
        raise SettingsError(f"context 'stackName' is not a valid CloudFormation stack name: {name!r}")
    return name


def _str(node: Node, key: str, default: str) -> str:
    value: Any = node.try_get_context(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise SettingsError(f"context {key!r} must be a string, got {value!r}")
    return value


def _concurrency(value: Any) -> int:
    """A reserved concurrency: a positive whole number (``-c interruptionConcurrency=200`` is a string)."""
    if value is None or value == "":
        return DEFAULT_INTERRUPTION_CONCURRENCY
    try:
        number = int(str(value).strip())
    except ValueError:
        number = 0
    if isinstance(value, bool) or not 1 <= number <= 10_000:
        raise SettingsError(
            f"context {INTERRUPTION_CONCURRENCY!r} must be a whole number from 1 to 10000, got {value!r}"
        )
    return number


def _bool(value: Any, default: bool = False, key: str = "") -> bool:
    """true/1/yes or false/0/no (`-c key=true` arrives as a string); anything else fails the synth."""
    if value is None or value == "":
        return default
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    if word in {"1", "true", "yes"}:
        return True
    if word in {"0", "false", "no"}:
        return False
    raise SettingsError(f"context {key!r} must be true or false (1/0, yes/no), got {value!r}")


def _matching(node: Node, key: str, pattern: re.Pattern[str]) -> str:
    value = _str(node, key, "")
    if value and not pattern.match(value):
        raise SettingsError(f"context {key!r} is not valid: {value!r}")
    return value


def _ids(node: Node, key: str) -> tuple[str, ...]:
    """A list, or a comma-separated string (``-c subnetIds=subnet-1,subnet-2``)."""
    value: Any = node.try_get_context(key)
    if value is None or value == "":
        return ()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise SettingsError(f"context {key!r} must be a list of ids or a comma-separated string, got {value!r}")
    ids = tuple(i.strip() for i in items if i.strip())
    bad = [i for i in ids if not _IDS[key].match(i)]
    if bad:
        raise SettingsError(f"context {key!r}: not valid ids: {bad}")
    return ids


def _network(node: Node) -> Network | None:
    vpc_id = _matching(node, "vpcId", _IDS["vpcId"])
    subnets = _ids(node, "subnetIds")
    groups = _ids(node, "securityGroupIds")
    if not vpc_id:
        if subnets or groups:
            raise SettingsError("context 'subnetIds'/'securityGroupIds' need 'vpcId' as well")
        return None
    if not subnets:
        raise SettingsError("context 'vpcId' needs 'subnetIds' (private subnets that reach the cluster endpoint)")
    return Network(vpc_id=vpc_id, subnet_ids=subnets, security_group_ids=groups)


def _policy(value: Any, policy_file: str, cluster: str) -> tuple[str, Policy]:
    """The policy from context ``policy`` (a mapping, or JSON/YAML text) or ``policyFile``,
    validated with gpuwarden's own ``parse_policy``; the default is ``{"cluster": <cluster>}``."""
    if policy_file and value not in (None, ""):
        raise SettingsError("set context 'policy' or 'policyFile', not both")
    source = "context 'policy'"
    if policy_file:
        path = Path(policy_file)
        path = path if path.is_absolute() or path.exists() else REPO_ROOT / path
        try:
            value = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SettingsError(f"context 'policyFile' {policy_file}: {exc.strerror}") from exc
        source = f"context 'policyFile' {policy_file}"
    if value is None or value == "":
        value = {}
    text = value if isinstance(value, str) else json.dumps(value)
    try:
        document = _document(text, source)
    except InvalidPolicy as exc:
        raise SettingsError(f"invalid gpuwarden policy: {exc}") from exc
    if document.setdefault("cluster", cluster) != cluster:
        raise SettingsError(
            f"{source}: the policy's cluster {document['cluster']!r} is not context 'cluster' {cluster!r}"
        )
    canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
    try:
        policy = parse_policy(canonical, source)
    except InvalidPolicy as exc:
        raise SettingsError(f"invalid gpuwarden policy: {exc}") from exc
    return canonical, policy


def _document(text: str, source: str) -> dict[str, Any]:
    import yaml

    try:
        document: Any = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise InvalidPolicy(f"{source}: not YAML/JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise InvalidPolicy(f"{source}: the policy must be a mapping, not {type(document).__name__}")
    return document
