"""The synthesized drain workflow executed by moto's Amazon States Language interpreter (LocalStack's,
vendored in moto 5.2), with the real drain handler as its task (docs/architecture.md, "The drain
workflow, executed").

moto's interpreter runs the definition as Step Functions would (the Task's Parameters with
``$$.State.RetryCount``, Retry with backoff and full jitter, Catch → Fail with ``CausePath``, Choice,
Wait on ``$.wait_seconds``, the execution name's idempotency); it runs an execution in a thread of
this process. What it cannot do alone is run Python Lambda code without Docker. Three seams are
routed here, nothing else is changed:

- the Task's invoke: the CDK task (``payload_response_only``) names the function's ARN as its
  Resource, so the interpreter's ``StateTaskLambda`` calls ``lambda:Invoke`` through boto3. moto
  without Docker answers it with ``LambdaSimpleBackend.invoke``, which echoes the input: that
  method is put back to the full ``LambdaBackend.invoke`` (the function by name, then
  ``LambdaFunction.invoke``, which sets the function-error header), and the one method that would
  start a container, ``LambdaFunction._invoke_lambda(event)``, is replaced by a call of
  ``gpuwarden.handlers.drain.handler`` (the deployed entry point, its Powertools decorators
  included) in this process, with a Lambda context whose remaining time runs on the simulator's
  clock. It answers as Lambda does: the result, or for an unhandled error ``{"errorType",
  "errorMessage"}`` with a function error, which the interpreter turns into the error name its
  Retry and Catch match (``errorType``) and the cause (the whole payload, as Step Functions does);
- the Wait state (``WaitFunction._wait_interval``) and the Retry's pause (``retrier_decl.time``)
  sleep on the simulator's clock (`Deps.sleep`), so a 6 h workflow takes seconds; on the clock
  that moves only when the code sleeps (sim/stepped.py) they are what moves it, and the Retry's
  full jitter (``jitter_strategy_decl.random``) draws from a generator seeded per scene: a scene's
  end is a function of its inputs, at any load. The state machine's own 6 h ``TimeoutSeconds`` is
  a real-time ``join`` in moto's ``Program.eval``: no scene reaches it;
- the drain function's dependencies (``handlers.drain.invocation_deps``) are the scene's: the real
  adapters on the simulator (`sim.wiring.sim_deps`), bounded by the context's remaining time as
  ``_runtime.invocation_deps`` bounds them deployed.

moto, its Lambda function and the EC2 backend are made once per module, before any scene: they cost
tens of seconds of real time (no simulated time on the stepped clock, but still real seconds for
the suite).
"""

from __future__ import annotations

import io
import json
import random
import time
import types
import uuid
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from itertools import count
from typing import Any
from unittest import mock

import boto3

from gpuwarden.adapters.stepfunctions import execution_name
from gpuwarden.handlers import _runtime
from gpuwarden.handlers import drain as drain_handler
from gpuwarden.services.engine.context import Deps

REGION = "us-west-2"
FUNCTION = "gpuwarden-drain-step"
#: the drain function's timeout as deployed (infra/components/functions.py's default)
FUNCTION_TIMEOUT_SECONDS = 300


def definition_of(template: dict[str, Any], function_arn: str) -> str:
    """The state machine's definition from the synthesized template, with the function's ARN."""
    (machine,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    parts = machine["Properties"]["DefinitionString"]["Fn::Join"][1]
    return "".join(part if isinstance(part, str) else function_arn for part in parts)


@dataclass
class LambdaContext:
    """What the Lambda runtime hands the handler; the remaining time runs on the simulator's clock."""

    clock: Any
    started: datetime
    function_name: str = FUNCTION
    memory_limit_in_mb: int = 512
    invoked_function_arn: str = f"arn:aws:lambda:{REGION}:123456789012:function:{FUNCTION}"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    def get_remaining_time_in_millis(self) -> int:
        spent = (self.clock() - self.started).total_seconds()
        return int((FUNCTION_TIMEOUT_SECONDS - spent) * 1000)


@dataclass
class Routed:
    """The scene the routed seams serve now: its deps, and every invocation's input, in order."""

    deps: Deps | None = None
    inputs: list[dict[str, Any]] = field(default_factory=list)
    #: run before each invocation with its index (0: the first round): a fault that must meet the rounds
    before_round: Callable[[int], object] | None = None
    #: the Retry's full jitter draws from this, seeded per scene: the same scene, the same pauses
    jitter: random.Random = field(default_factory=lambda: random.Random(0))

    def scene_deps(self) -> Deps:
        assert self.deps is not None, "no scene: the workflow was invoked outside `Machine.scene`"
        return self.deps

    def sleep(self, seconds: float) -> None:
        self.scene_deps().sleep(seconds)

    def uniform(self, low: float, high: float) -> float:
        return self.jitter.uniform(low, high)

    def invoke(self, event: Any = None) -> tuple[str, bool, str]:
        """``LambdaFunction._invoke_lambda``'s place (a bound method on the class: not rebound)."""
        payload = event if isinstance(event, dict) else json.loads(event or "{}")
        self.inputs.append(payload)
        if self.before_round is not None:
            self.before_round(len(self.inputs) - 1)
        deps = self.scene_deps()
        context = LambdaContext(clock=deps.clock, started=deps.clock())
        try:
            return json.dumps(drain_handler.handler(payload, context)), False, ""
        except Exception as err:  # what Lambda answers for an unhandled error
            return json.dumps({"errorType": type(err).__name__, "errorMessage": str(err)}), True, ""


@dataclass
class Workflow:
    """One scene's state machine (the synthesized definition), its deps and its invocations."""

    client: Any
    arn: str
    deps: Deps
    inputs: list[dict[str, Any]]

    def start(self, state: dict[str, Any]) -> None:
        """What the deployed functions' `start_drain` does (adapters/stepfunctions.py)."""
        name = execution_name(state)
        try:
            self.client.start_execution(stateMachineArn=self.arn, name=name, input=json.dumps(state))
        except self.client.exceptions.ExecutionAlreadyExists:
            return

    def executions(self) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = self.client.list_executions(stateMachineArn=self.arn)["executions"]
        return listed

    def finished(self, bound_seconds: float = 240.0) -> dict[str, Any]:
        """The one execution, once it ends (a real-time bound only against a hang)."""
        (execution,) = self.executions()
        until = time.monotonic() + bound_seconds
        while True:
            described: dict[str, Any] = self.client.describe_execution(executionArn=execution["executionArn"])
            if described["status"] != "RUNNING" or time.monotonic() > until:
                return described
            time.sleep(0.05)

    def history(self, execution: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = self.client.get_execution_history(executionArn=execution["executionArn"])[
            "events"
        ]
        return events


@dataclass
class Machine:
    """moto with the state machine executing, the drain function routed to the real handler."""

    client: Any
    definition: str
    role: str
    routed: Routed
    names: Iterator[int] = field(default_factory=count)

    @contextmanager
    def scene(self, deps: Deps) -> Iterator[Workflow]:
        """A fresh state machine of the synthesized definition whose invocations run on ``deps``."""
        name = f"gpuwarden-drain-{next(self.names)}"
        arn = self.client.create_state_machine(name=name, definition=self.definition, roleArn=self.role)[
            "stateMachineArn"
        ]
        self.routed.deps, self.routed.inputs, self.routed.jitter = deps, [], random.Random(0)
        try:
            yield Workflow(self.client, arn, deps, self.routed.inputs)
        finally:
            self.routed.deps, self.routed.before_round = None, None


def _placeholder_zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("README", "routed to the real handler in this process (tests/infra/executed_workflow.py)")
    return buffer.getvalue()


@contextmanager
def executing_machine(template: dict[str, Any]) -> Iterator[Machine]:
    """moto (Step Functions executing, Lambda without Docker), the drain function made, EC2 warmed."""
    from moto import mock_aws
    from moto.awslambda.models import LambdaBackend, LambdaFunction
    from moto.awslambda_simple.models import LambdaSimpleBackend
    from moto.stepfunctions.parser.asl.component.common.retry import jitter_strategy_decl, retrier_decl
    from moto.stepfunctions.parser.asl.component.state.wait.wait_function.wait_function import WaitFunction

    routed = Routed()
    config: Any = {"stepfunctions": {"execute_state_machine": True}, "lambda": {"use_docker": False}}
    with (
        mock_aws(config=config),
        # without Docker moto's Lambda is `LambdaSimpleBackend`, whose invoke echoes the input: the
        # full backend's invoke instead (the function's `invoke`: the function-error header)
        mock.patch.object(LambdaSimpleBackend, "invoke", LambdaBackend.invoke),
        mock.patch.object(LambdaFunction, "_invoke_lambda", routed.invoke),
        mock.patch.object(WaitFunction, "_wait_interval", lambda _self, env, wait_seconds: routed.sleep(wait_seconds)),
        mock.patch.object(retrier_decl, "time", types.SimpleNamespace(sleep=routed.sleep)),
        mock.patch.object(jitter_strategy_decl, "random", types.SimpleNamespace(uniform=routed.uniform)),
        mock.patch.object(
            drain_handler, "invocation_deps", lambda context: _runtime.invocation_deps(context, routed.scene_deps())
        ),
    ):
        iam = boto3.client("iam", region_name=REGION)
        assume = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "sts:AssumeRole"}]}
        role = iam.create_role(RoleName="drain", AssumeRolePolicyDocument=json.dumps(assume))["Role"]["Arn"]
        function = boto3.client("lambda", region_name=REGION).create_function(
            FunctionName=FUNCTION,
            Runtime="python3.13",
            Role=role,
            Handler="gpuwarden.handlers.drain.handler",
            Code={"ZipFile": _placeholder_zip()},
            Timeout=FUNCTION_TIMEOUT_SECONDS,
        )["FunctionArn"]
        # a Spot warning's first invocation asks EC2 first: moto's first call is made now, not in a scene
        boto3.client("ec2", region_name=REGION).describe_instances()
        client = boto3.client("stepfunctions", region_name=REGION)
        yield Machine(client, definition_of(template, function), role, routed)
