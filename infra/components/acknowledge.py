"""Acknowledged scanner findings, written next to the construct they concern.

Two scanners read the synthesized template (README "Security"):

- cdk-nag acknowledgements are ``Validations.of(construct).acknowledge(Acknowledgment(...))``
  (cdk.out/validation-report.json lists them with their reasons);
- checkov skips are CloudFormation resource ``Metadata``, the format checkov reads for
  CloudFormation templates::

      Metadata:
        checkov:
          skip:
            - id: CKV_AWS_116
              comment: <the reason>

  :func:`checkov_skip` writes one such entry on a construct's CloudFormation resource, so the
  reason travels with the template to whoever scans it.
"""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnResource
from constructs import IConstruct

#: a reason a reviewer can check says what is there instead and why: never just "ok"
MIN_REASON_LENGTH = 40


class AcknowledgementError(ValueError):
    """An acknowledgement without a usable reason or target (raised at synth time)."""


def checkov_skip(scope: IConstruct, check: str, reason: str) -> None:
    """Acknowledge checkov finding ``check`` (e.g. ``CKV_AWS_116``) on ``scope``'s CFN resource."""
    if len(reason.strip()) < MIN_REASON_LENGTH:
        raise AcknowledgementError(f"{check} on {scope.node.path}: give a reason a reviewer can check, not {reason!r}")
    resource = _cfn_resource(scope)
    metadata: Any = resource.get_metadata("checkov") or {}
    skips: list[dict[str, str]] = list(metadata.get("skip", []))
    if any(skip["id"] == check for skip in skips):
        raise AcknowledgementError(f"{check} on {scope.node.path} is acknowledged twice: keep one reason")
    skips.append({"id": check, "comment": reason.strip()})
    resource.add_metadata("checkov", {**metadata, "skip": skips})


def _cfn_resource(scope: IConstruct) -> CfnResource:
    if isinstance(scope, CfnResource):
        return scope
    child = scope.node.default_child
    if not isinstance(child, CfnResource):
        raise AcknowledgementError(f"{scope.node.path} has no CloudFormation resource to carry a checkov skip")
    return child
