"""The drain loop: drain_step → done? → Wait $.wait_seconds → drain_step … (Standard, 6 h max).

A round that fails with a fault retrying may fix (`gpuwarden.domain.drain_faults.TRANSIENT`) is
retried with backoff (`RETRY`); the function itself says when the notice's deadline (or the
voluntary bound) leaves no more room, with `DrainGaveUp`, which ends the run in `NotDrained` with
what is left on the node. Any other error fails the execution at once (docs/architecture.md).
"""

from __future__ import annotations

from aws_cdk import Acknowledgment, Duration, Stack, Validations
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_stepfunctions as sfn
from aws_cdk import aws_stepfunctions_tasks as tasks
from constructs import Construct

from gpuwarden.domain.drain_faults import RETRY, TRANSIENT
from gpuwarden.domain.errors import DrainGaveUp
from infra.components.alarms import AlarmSink
from infra.components.encryption import acknowledge_aws_keys, log_group_key
from infra.components.naming import name_prefix

DRAIN_TIMEOUT = Duration.hours(6)


class DrainWorkflow(Construct):
    def __init__(
        self, scope: Construct, construct_id: str, *, drain_step: lambda_.IFunction, alarms: AlarmSink
    ) -> None:
        super().__init__(scope, construct_id)
        step = tasks.LambdaInvoke(
            self,
            "DrainStep",
            comment="One drain_step round; its output is the next round's input",
            lambda_function=drain_step,
            payload_response_only=True,
            # the round's state, and how many times this state has retried (the voluntary bound)
            payload=sfn.TaskInput.from_object(
                {"state": sfn.JsonPath.entire_payload, "retry_count": sfn.JsonPath.number_at("$$.State.RetryCount")}
            ),
            # retries Lambda.ServiceException, AWSLambdaException, SdkClientException and
            # ClientExecutionTimeoutException with backoff
            retry_on_service_exceptions=True,
        )
        # throttles are not in retry_on_service_exceptions' list
        step.add_retry(
            errors=["Lambda.TooManyRequestsException"],
            interval=Duration.seconds(2),
            max_attempts=8,
            backoff_rate=2,
            jitter_strategy=sfn.JitterType.FULL,
        )
        step.add_retry(
            errors=[error.__name__ for error in TRANSIENT],
            interval=Duration.seconds(RETRY.interval_seconds),
            backoff_rate=RETRY.backoff_rate,
            max_delay=Duration.seconds(RETRY.max_delay_seconds),
            max_attempts=RETRY.max_attempts,
            jitter_strategy=sfn.JitterType.FULL,
        )
        not_drained = sfn.Fail(
            self,
            "NotDrained",
            comment="The faults outlasted the deadline (or the voluntary bound): the cause names what is left",
            error="DrainNotFinished",
            cause_path="$.error.Cause",
        )
        step.add_catch(not_drained, errors=[DrainGaveUp.__name__], result_path="$.error")
        drained = sfn.Succeed(self, "Drained")
        wait = sfn.Wait(self, "WaitForNextRound", time=sfn.WaitTime.seconds_path("$.wait_seconds"))
        done = (
            sfn.Choice(self, "Done?")
            .when(sfn.Condition.boolean_equals("$.done", True), drained)
            .otherwise(wait.next(step))
        )
        self.log_group = logs.LogGroup(
            self,
            "Logs",
            log_group_name=f"/aws/vendedlogs/states/{name_prefix(self)}-drain",
            retention=logs.RetentionDays.ONE_MONTH,
            **log_group_key(self),
        )
        acknowledge_aws_keys(self.log_group)
        self.state_machine = sfn.StateMachine(
            self,
            "StateMachine",
            comment="gpuwarden drain: repeat drain_step until it reports done",
            definition_body=sfn.DefinitionBody.from_chainable(step.next(done)),
            state_machine_type=sfn.StateMachineType.STANDARD,
            timeout=DRAIN_TIMEOUT,
            tracing_enabled=True,
            logs=sfn.LogOptions(destination=self.log_group, level=sfn.LogLevel.ALL, include_execution_data=True),
        )
        Validations.of(self.state_machine.role).acknowledge(
            Acknowledgment(
                id="AwsSolutions::AwsSolutions-IAM5[Resource::*]",
                reason=(
                    "Added by CDK for logging and tracing: logs:CreateLogDelivery/GetLogDelivery/"
                    "UpdateLogDelivery/DeleteLogDelivery/ListLogDeliveries/PutResourcePolicy/DescribeResourcePolicies/"
                    "DescribeLogGroups and xray:PutTraceSegments/PutTelemetryRecords/GetSamplingRules/"
                    "GetSamplingTargets do not support resource-level permissions."
                ),
            ),
            Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Resource::<{self._logical_arn(drain_step)}.Arn>:*]",
                reason=(
                    "lambda:InvokeFunction on the drain function's qualified ARNs (versions/aliases) of that "
                    "one function, as added by the LambdaInvoke task; no other function matches."
                ),
            ),
        )
        self.failed_alarm = cloudwatch.Alarm(
            self,
            "ExecutionsFailed",
            alarm_description=("gpuwarden drain executions failed, timed out or aborted: a node may be half-drained"),
            metric=cloudwatch.MathExpression(
                expression="failed + timedout + aborted",
                using_metrics={
                    "failed": self.state_machine.metric_failed(period=Duration.minutes(5)),
                    "timedout": self.state_machine.metric_timed_out(period=Duration.minutes(5)),
                    "aborted": self.state_machine.metric_aborted(period=Duration.minutes(5)),
                },
                period=Duration.minutes(5),
            ),
            threshold=0,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=1,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        alarms.notify(self.failed_alarm)

    @staticmethod
    def _logical_arn(function: lambda_.IFunction) -> str:
        """cdk-nag renders the function's ARN by the CFN logical id of the function resource."""
        default_child = function.node.default_child
        assert default_child is not None
        return Stack.of(function).get_logical_id(default_child)  # type: ignore[arg-type]
