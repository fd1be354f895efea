"""The Lambda functions: one spec line per entry point, one role and log group per function.

Adding an entry point is one line here (a :class:`FunctionSpec`) and one line in the stack
(``functions.add(SPEC)``); give it extra permissions with ``fn.role.add_to_policy(...)``.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ssm as ssm
from constructs import Construct

from infra.components.acknowledge import checkov_skip
from infra.components.alarms import AlarmSink
from infra.components.bundling import function_code
from infra.components.cluster_access import function_access_entry
from infra.components.encryption import acknowledge_aws_keys, environment_key, log_group_key
from infra.components.network import FunctionNetwork, acknowledge_outside_vpc
from infra.components.queues import DeadLetterQueue
from infra.components.runtime_layer import LAMBDA_RUNTIME, lambda_architecture
from infra.config import DEFAULT_INTERRUPTION_CONCURRENCY


@dataclass(frozen=True)
class AsyncInvoke:
    """Lambda's own retries of an asynchronous invocation that failed (AWS::Lambda::EventInvokeConfig),
    chosen per kind of input; every row and its reason is in docs/deploy.md#lambdas-own-retries."""

    #: retries after the first failed attempt (Lambda waits about 1 min, then 2 min)
    retry_attempts: int
    #: an event older than this is not tried again: it goes to the on-failure queue (alarmed)
    max_event_age_seconds: int
    #: why these numbers for the inputs this function takes
    reason: str


@dataclass(frozen=True)
class FunctionSpec:
    name: str  # construct id, e.g. "Interruption"
    handler: str  # dotted path inside functions/
    description: str
    #: concurrent executions reserved for (and capped at) this function: README "Security" says why each
    reserved_concurrency: int
    timeout_seconds: int = 300
    memory_mb: int = 256
    #: invoked asynchronously (EventBridge, Scheduler): Lambda's own retries, an on-failure queue
    invoked_async: AsyncInvoke | None = None
    #: who invokes it synchronously (not invoked_async): a Lambda DLQ would never receive anything
    sync_caller: str = ""


INTERRUPTION = FunctionSpec(
    "Interruption",
    "gpuwarden.handlers.interruption.handler",
    "EC2 spot warnings, rebalance recommendations, state changes: cordon, replace, start the drain",
    reserved_concurrency=DEFAULT_INTERRUPTION_CONCURRENCY,  # context interruptionConcurrency
    invoked_async=AsyncInvoke(
        retry_attempts=1,
        max_event_age_seconds=120,
        reason=(
            "a Spot warning's notice is 120 s: one retry (about a minute later) still finds the instance; "
            "a retry after the deadline would drain a node EC2 did not take, which is worse than none. "
            "After the mark a failure is handed to the drain workflow, not retried here"
        ),
    ),
)
DRAIN = FunctionSpec(
    "Drain",
    "gpuwarden.handlers.drain.handler",
    "One drain_step round (Step Functions loop)",
    reserved_concurrency=20,
    sync_caller="the drain workflow (Step Functions LambdaInvoke, RequestResponse; throttles and errors retried there)",
)
GPU_IDLE = FunctionSpec(
    "GpuIdle",
    "gpuwarden.handlers.gpu_signals.handler",
    "GPU-idle reclaim",
    reserved_concurrency=5,
    invoked_async=AsyncInvoke(
        retry_attempts=2,
        max_event_age_seconds=600,
        reason=(
            "an alarm or an alert is evidence of now (an alert is not re-checked against CloudWatch): "
            "retried within 10 min (gpu_health.repair_after's default), never acted on once it is stale"
        ),
    ),
)
MAINTENANCE = FunctionSpec(
    "Maintenance",
    "gpuwarden.handlers.planning.handler",
    "AWS Health scheduled changes",
    reserved_concurrency=5,
    invoked_async=AsyncInvoke(
        retry_attempts=2,
        max_event_age_seconds=6 * 3600,
        reason=(
            "a scheduled change is announced days ahead and planning it is idempotent: every retry "
            "Lambda allows, as long as it allows (6 h)"
        ),
    ),
)
WINDOWS = FunctionSpec(
    "Windows",
    "gpuwarden.handlers.scheduled.handler",
    "Budget windows",
    reserved_concurrency=2,
    invoked_async=AsyncInvoke(
        retry_attempts=2,
        max_event_age_seconds=3600,
        reason=(
            "a window tick is level-triggered (the windows are read from the clock when it runs): a "
            "retried tick is fine; after 1 h the periodic reconcile has converged the NodePools anyway"
        ),
    ),
)
RUNBOOK = FunctionSpec(
    "Runbook",
    "gpuwarden.handlers.runbook.handler",
    "Runbook actions (direct invoke)",
    reserved_concurrency=5,
    sync_caller="operators (gpuwarden runbook --remote) and the SSM Automation documents, RequestResponse",
)

#: Every function's spec, in the order the stack adds them.
SPECS = (INTERRUPTION, DRAIN, GPU_IDLE, MAINTENANCE, WINDOWS, RUNBOOK)

L1_REASON = (
    "Python 3.13 on purpose: the layer's and the code's .pyc files are compiled by CPython 3.13 "
    "(unchecked-hash) and a .pyc is only used by the interpreter version that wrote it; pyenv on the "
    "build machines has no newer Python. Move runtime and compiler together."
)
XRAY_REASON = (
    "Resource::* only for xray:PutTraceSegments/PutTelemetryRecords (added by tracing=ACTIVE; X-Ray has "
    "no resource-level permissions) and for read-only ec2:Describe*/autoscaling:Describe* where granted "
    "(those actions do not support resource-level permissions)."
)


class Functions(Construct):
    """Shared code asset, layer and environment for every gpuwarden function."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        layer: lambda_.ILayerVersion,
        architecture: str,
        cluster: str,
        table: dynamodb.ITable,
        policy_parameter: ssm.IStringParameter,
        alarms: AlarmSink,
        skip_bundling: bool,
        network: FunctionNetwork | None = None,
        cluster_access: bool = False,
        policy_version: str = "",
    ) -> None:
        super().__init__(scope, construct_id)
        self.code = function_code(skip=skip_bundling)
        #: VPC placement for every function (context vpcId/subnetIds/securityGroupIds)
        self.network = network
        #: an EKS access entry (Kubernetes group `gpuwarden`) for every function role
        self.cluster_access = cluster_access
        self.layer = layer
        self.architecture = lambda_architecture(architecture)
        self.cluster = cluster
        self.table = table
        self.policy_parameter = policy_parameter
        self.alarms = alarms
        self.environment = {
            "GPUWARDEN_STATE_TABLE": table.table_name,
            "GPUWARDEN_POLICY_PARAMETER": policy_parameter.parameter_name,
            "GPUWARDEN_POLICY_VERSION": policy_version,
            "GPUWARDEN_CLUSTER": cluster,
            "POWERTOOLS_SERVICE_NAME": "gpuwarden",
            "POWERTOOLS_METRICS_NAMESPACE": "Gpuwarden",
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
        }
        self.by_name: dict[str, GpuwardenFunction] = {}

    def add(self, spec: FunctionSpec) -> GpuwardenFunction:
        fn = GpuwardenFunction(self, spec.name, spec=spec, shared=self)
        self.by_name[spec.name] = fn
        return fn


class GpuwardenFunction(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, spec: FunctionSpec, shared: Functions) -> None:
        super().__init__(scope, construct_id)
        self.spec = spec
        self.role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"gpuwarden {spec.name} function (least privilege, no managed policies)",
        )
        self.log_group = logs.LogGroup(self, "Logs", retention=logs.RetentionDays.ONE_MONTH, **log_group_key(self))
        self.failures: DeadLetterQueue | None = None
        async_options: dict[str, object] = {}
        if spec.invoked_async is not None:
            self.failures = DeadLetterQueue(
                self,
                "FailedInvocations",
                purpose=f"{spec.name} invocations that failed",
                alarms=shared.alarms,
            )
            async_options = {
                "retry_attempts": spec.invoked_async.retry_attempts,
                "max_event_age": Duration.seconds(spec.invoked_async.max_event_age_seconds),
                "on_failure": destinations.SqsDestination(self.failures.queue),
            }
        self.function = lambda_.Function(
            self,
            "Function",
            description=f"gpuwarden: {spec.description}",
            runtime=LAMBDA_RUNTIME,
            architecture=shared.architecture,
            handler=spec.handler,
            code=shared.code,
            layers=[shared.layer],
            memory_size=spec.memory_mb,
            timeout=Duration.seconds(spec.timeout_seconds),
            environment=dict(shared.environment),
            tracing=lambda_.Tracing.ACTIVE,
            log_group=self.log_group,
            role=self.role,
            reserved_concurrent_executions=spec.reserved_concurrency,
            **async_options,  # type: ignore[arg-type]
            **(shared.network.function_options() if shared.network else {}),
            **environment_key(self),
        )
        self._acknowledge_checkov(spec, shared)
        if shared.network:
            FunctionNetwork.allow_enis(self.role)
        if shared.cluster_access:
            self.access_entry = function_access_entry(self, shared.cluster, self.role)
        self.log_group.grant_write(self.role)
        shared.table.grant_read_write_data(self.role)
        shared.policy_parameter.grant_read(self.role)
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid="EksToken",
                actions=["eks:DescribeCluster"],
                resources=[Stack.of(self).format_arn(service="eks", resource="cluster", resource_name=shared.cluster)],
            )
        )
        Validations.of(self.function).acknowledge(Acknowledgment(id="AwsSolutions::AwsSolutions-L1", reason=L1_REASON))
        Validations.of(self.role).acknowledge(
            Acknowledgment(id="AwsSolutions::AwsSolutions-IAM5[Resource::*]", reason=XRAY_REASON)
        )
        self.errors_alarm = cloudwatch.Alarm(
            self,
            "Errors",
            alarm_description=f"gpuwarden {spec.name} function errors",
            metric=self.function.metric_errors(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        shared.alarms.notify(self.errors_alarm)
        self.throttles_alarm = cloudwatch.Alarm(
            self,
            "Throttles",
            alarm_description=f"gpuwarden {spec.name} function throttled: events wait or are retried",
            metric=self.function.metric_throttles(period=Duration.minutes(5), statistic=cloudwatch.Stats.SUM),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        shared.alarms.notify(self.throttles_alarm)

    def _acknowledge_checkov(self, spec: FunctionSpec, shared: Functions) -> None:
        """The checkov findings this function answers with a reason instead of a change."""
        if self.failures is not None:
            dlq_reason = (
                "Invoked asynchronously: failed invocations go to an on-failure destination (AWS::Lambda::"
                f"EventInvokeConfig, queue {self.failures.node.path}, alarmed), which supersedes a DLQ; "
                "checkov only reads DeadLetterConfig."
            )
        else:
            assert spec.sync_caller, f"{spec.name}: say who invokes it synchronously (FunctionSpec.sync_caller)"
            dlq_reason = (
                f"Invoked synchronously by {spec.sync_caller}: a Lambda DLQ only ever receives asynchronous "
                "invocations, so it would stay empty; the caller gets every error."
            )
        checkov_skip(self.function, "CKV_AWS_116", dlq_reason)
        if shared.network is None:
            acknowledge_outside_vpc(self.function)
        acknowledge_aws_keys(self.log_group, self.function)

    def allow(self, sid: str, actions: list[str], resources: list[str], **conditions: object) -> None:
        """Add one least-privilege statement to this function's role."""
        self.role.add_to_policy(
            iam.PolicyStatement(
                sid=sid,
                actions=actions,
                resources=resources,
                conditions=dict(conditions) if conditions else None,
            )
        )
