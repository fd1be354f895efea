"""Deployment settings, read once from CDK context (cdk.json or ``-c key=value``)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from constructs import Node

DEFAULT_CLUSTER = "ml-prod"
ARCHITECTURES = ("x86_64", "arm64")

#: context key that skips building the layer and the code asset (tests without a wheel cache)
SKIP_BUNDLING = "gpuwardenSkipBundling"

_CLUSTER_NAME = re.compile(r"^[0-9A-Za-z][A-Za-z0-9\-_]{0,99}$")  # EKS cluster name rules


class SettingsError(ValueError):
    """A context value is invalid; the message names the key."""


@dataclass(frozen=True)
class Settings:
    cluster: str = DEFAULT_CLUSTER
    lambda_architecture: str = "x86_64"
    #: the policy document (JSON text) stored in the SSM parameter
    policy_json: str = ""
    #: SNS topic for alarm notifications; alarms have no action when empty
    alarm_topic_arn: str = ""
    skip_bundling: bool = False

    @classmethod
    def from_context(cls, node: Node) -> Settings:
        cluster = _str(node, "cluster", DEFAULT_CLUSTER)
        if not _CLUSTER_NAME.match(cluster):
            raise SettingsError(f"context 'cluster' is not a valid EKS cluster name: {cluster!r}")
        arch = _str(node, "lambdaArchitecture", "x86_64")
        if arch not in ARCHITECTURES:
            raise SettingsError(f"context 'lambdaArchitecture' must be one of {ARCHITECTURES}, got {arch!r}")
        return cls(
            cluster=cluster,
            lambda_architecture=arch,
            policy_json=_policy(node.try_get_context("policy"), cluster),
            alarm_topic_arn=_str(node, "alarmTopicArn", ""),
            skip_bundling=_bool(node.try_get_context(SKIP_BUNDLING)),
        )


def _str(node: Node, key: str, default: str) -> str:
    value: Any = node.try_get_context(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise SettingsError(f"context {key!r} must be a string, got {value!r}")
    return value


def _bool(value: Any) -> bool:
    if isinstance(value, str):  # `-c key=true` arrives as a string
        return value.strip().lower() in {"1", "true", "yes"}
    return bool(value)


def _policy(value: Any, cluster: str) -> str:
    """The policy as canonical JSON: a dict, JSON text, or the default ``{"cluster": ...}``."""
    if value is None or value == "":
        document: Any = {"cluster": cluster}
    elif isinstance(value, str):
        try:
            document = json.loads(value)
        except json.JSONDecodeError as exc:
            raise SettingsError(f"context 'policy' is not valid JSON: {exc}") from exc
    else:
        document = value
    if not isinstance(document, dict):
        raise SettingsError("context 'policy' must be a JSON object")
    document.setdefault("cluster", cluster)
    return json.dumps(document, sort_keys=True, separators=(",", ":"))
