"""Encryption at rest: AWS's own keys by default, one customer-managed KMS key on request.

By default every store is encrypted with keys AWS owns or manages: the queues with SSE-SQS, the
log groups by CloudWatch Logs, the table with the ``aws/dynamodb`` key, the functions'
environment with ``aws/lambda``. Context ``customerManagedKey=true`` creates one KMS key
(rotated yearly) and uses it for all of them instead, so the user's key policy and CloudTrail
decide who can read gpuwarden's logs, ledger, dead letters and settings.

Without the key, checkov's customer-key checks (CKV_AWS_27, 119, 158, 173) are acknowledged on
each resource with the reason below (:func:`infra.components.acknowledge.checkov_skip`).
"""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, ArnFormat, Stack, Validations
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct, IConstruct

from infra.components.acknowledge import checkov_skip
from infra.config import CUSTOMER_MANAGED_KEY as CONTEXT_KEY

_OPT_IN = f"; set context {CONTEXT_KEY}=true to use a customer-managed KMS key instead (docs/security.md)."
QUEUE_REASON = (
    "Encrypted at rest with SSE-SQS (SqsManagedSseEnabled: true, SQS-owned keys); CKV_AWS_27 only reads "
    "KmsMasterKeyId. The AWS-managed aws/sqs key is not an option: EventBridge cannot deliver to a DLQ "
    "encrypted with it" + _OPT_IN
)
LOG_GROUP_REASON = (
    "CloudWatch Logs encrypts every log group at rest with service-managed keys; gpuwarden logs node and "
    "pod names, never tokens or credentials (tests/reliability/test_no_secrets_logged.py)" + _OPT_IN
)
TABLE_REASON = (
    "Encrypted at rest with the AWS-managed aws/dynamodb key (SSEEnabled: true); the ledger holds event ids, "
    "node names and window state, no credentials" + _OPT_IN
)
ENVIRONMENT_REASON = (
    "Lambda encrypts environment variables at rest with the AWS-managed aws/lambda key; gpuwarden's hold "
    "only resource names and ARNs (table, parameter, cluster, state machine), no secrets" + _OPT_IN
)

KMS_GRANT_REASON = (
    "CDK's grants on the stack's own customer-managed key (SQS sends, DynamoDB and Lambda environment access): "
    "kms:GenerateDataKey*/kms:ReEncrypt* name the data-key variants those services call, on this one key only."
)


class StackKey(Construct):
    """The stack's customer-managed key, for every store that holds gpuwarden data."""

    ID = "Encryption"

    def __init__(self, scope: Construct) -> None:
        super().__init__(scope, self.ID)
        stack = Stack.of(scope)
        self.key = kms.Key(
            self,
            "Key",
            description=f"gpuwarden ({stack.stack_name}): logs, ledger table, dead-letter queues, function settings",
            enable_key_rotation=True,
        )
        # CloudWatch Logs encrypts this account's and region's log groups with it
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchLogs",
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=["kms:Encrypt*", "kms:Decrypt*", "kms:ReEncrypt*", "kms:GenerateDataKey*", "kms:Describe*"],
                resources=["*"],  # in a key policy, "*" is this key
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": stack.format_arn(
                            service="logs",
                            resource="log-group",
                            resource_name="*",
                            arn_format=ArnFormat.COLON_RESOURCE_NAME,
                        )
                    }
                },
            )
        )
        # EventBridge sends undeliverable events to the rules' dead-letter queue (encrypted with this key)
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="EventBridgeDeadLetters",
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey"],
                resources=["*"],
                conditions={"StringEquals": {"aws:SourceAccount": stack.account}},
            )
        )
        # the roles' grants on this key (queue sends, table and environment access) are CDK's own
        Validations.of(scope).acknowledge(  # gpuwarden's own roles only, not the rest of a team's stack
            *(
                Acknowledgment(id=f"AwsSolutions::AwsSolutions-IAM5[Action::{action}]", reason=KMS_GRANT_REASON)
                for action in ("kms:GenerateDataKey*", "kms:ReEncrypt*")
            )
        )


def stack_key(scope: IConstruct) -> kms.IKey | None:
    """The customer-managed key of ``scope``'s gpuwarden (the nearest scope that holds one: the stack,
    or a `Gpuwarden` construct in a team's own stack), or None (AWS's own keys)."""
    for holder in reversed(scope.node.scopes):
        child = holder.node.try_find_child(StackKey.ID)
        if isinstance(child, StackKey):
            return child.key
    return None


def queue_encryption(scope: IConstruct) -> dict[str, Any]:
    """``sqs.Queue`` keyword arguments: the stack's key, else SSE-SQS."""
    key = stack_key(scope)
    if key is None:
        return {"encryption": sqs.QueueEncryption.SQS_MANAGED}
    return {"encryption": sqs.QueueEncryption.KMS, "encryption_master_key": key}


def table_encryption(scope: IConstruct) -> dict[str, Any]:
    """``dynamodb.Table`` keyword arguments: the stack's key, else the AWS-managed key."""
    key = stack_key(scope)
    if key is None:
        return {"encryption": dynamodb.TableEncryption.AWS_MANAGED}
    return {"encryption": dynamodb.TableEncryption.CUSTOMER_MANAGED, "encryption_key": key}


def log_group_key(scope: IConstruct) -> dict[str, Any]:
    """``logs.LogGroup`` keyword arguments: the stack's key, or nothing (service-managed keys)."""
    key = stack_key(scope)
    return {"encryption_key": key} if key is not None else {}


def environment_key(scope: IConstruct) -> dict[str, Any]:
    """``lambda_.Function`` keyword arguments: the stack's key for the environment, or nothing."""
    key = stack_key(scope)
    return {"environment_encryption": key} if key is not None else {}


def acknowledge_aws_keys(*resources: IConstruct) -> None:
    """Acknowledge the customer-key findings on resources encrypted with AWS's own keys.

    Call it after creating queues, tables, log groups and functions; with the stack's key in
    use there is nothing to acknowledge and it does nothing.
    """
    for resource in resources:
        if stack_key(resource) is not None:
            continue
        check, reason = _customer_key_check(resource)
        checkov_skip(resource, check, reason)


def _customer_key_check(resource: IConstruct) -> tuple[str, str]:
    if isinstance(resource, sqs.Queue):
        return "CKV_AWS_27", QUEUE_REASON
    if isinstance(resource, dynamodb.Table):
        return "CKV_AWS_119", TABLE_REASON
    if isinstance(resource, logs.LogGroup):
        return "CKV_AWS_158", LOG_GROUP_REASON
    if isinstance(resource, lambda_.Function):
        return "CKV_AWS_173", ENVIRONMENT_REASON
    raise TypeError(f"no customer-key check for {type(resource).__name__} ({resource.node.path})")
