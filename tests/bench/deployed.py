"""The deployed stack's functions, stood up for a benchmark as `cdk deploy` would stand them up.

Each function's handler and environment come from the synthesized template (`synthesize`), not
from a list kept here: a setting the stack adds or renames reaches the benchmark with the stack.
The AWS resources a function's environment names (the policy parameter, the state table, the
drain workflow, ...) are created first in a moto server (`MotoStack`), from their template
properties (the policy parameter holds the policy document the stack synthesized), and the
environment's CloudFormation references are resolved to them. A reference to a resource this
module cannot stand up fails the benchmark with its name: a new setting is never silently dropped.
"""

from __future__ import annotations

import json
import logging
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ACCOUNT = "123456789012"
REGION = "us-west-2"
#: `cdk deploy -c cluster=…`: the cluster the benchmarks' events and nodes belong to
CLUSTER = "ml-prod"


class CannotStandUp(RuntimeError):
    """A function's environment names something the benchmark cannot create or resolve."""


@dataclass(frozen=True)
class DeployedFunction:
    logical_id: str
    #: the Lambda handler, e.g. ``gpuwarden.handlers.interruption.handler``
    handler: str
    #: ``Environment.Variables`` as synthesized: values may be CloudFormation intrinsics
    environment: Mapping[str, Any]

    @property
    def module(self) -> str:
        return self.handler.rsplit(".", 1)[0]

    @property
    def function(self) -> str:
        return self.handler.rsplit(".", 1)[1]


def synthesize(context: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The stack's CloudFormation template (assets not bundled: the code and layer assets change no
    function's handler or environment), synthesized by a child process: the CDK app's objects and
    its jsii runtime stay out of the benchmark's process, which hosts the simulators."""
    from tests.bench.common import REPO, bench_env

    cmd = [sys.executable, "-m", "tests.bench.deployed", json.dumps(dict(context or {}))]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=bench_env(), cwd=REPO, check=False, timeout=600)
    if proc.returncode != 0:
        raise CannotStandUp(f"cdk synth failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    template: dict[str, Any] = json.loads(proc.stdout)
    return template


def _synthesize_here(context: Mapping[str, Any]) -> dict[str, Any]:
    from infra.app import STACK_NAME, build_app
    from infra.config import SKIP_BUNDLING

    with tempfile.TemporaryDirectory(prefix="gpuwarden-synth-") as outdir:
        app = build_app(outdir=outdir, context={"cluster": CLUSTER, SKIP_BUNDLING: True, **context})
        app.synth()
        template: dict[str, Any] = json.loads((Path(outdir) / f"{STACK_NAME}.template.json").read_text())
    return template


def functions(template: Mapping[str, Any]) -> dict[str, DeployedFunction]:
    """Every gpuwarden function of the template, by its handler."""
    found: dict[str, DeployedFunction] = {}
    for logical_id, resource in template["Resources"].items():
        if resource["Type"] != "AWS::Lambda::Function":
            continue
        props = resource["Properties"]
        handler = str(props.get("Handler", ""))
        if handler.startswith("gpuwarden.handlers."):
            variables = props.get("Environment", {}).get("Variables", {})
            found[handler] = DeployedFunction(logical_id, handler, dict(variables))
    return found


def function_for(template: Mapping[str, Any], handler: str) -> DeployedFunction:
    """The function the stack deploys with this handler (``FunctionSpec.handler``)."""
    deployed = functions(template)
    if handler not in deployed:
        raise CannotStandUp(f"the stack deploys no function with handler {handler}: {sorted(deployed)}")
    return deployed[handler]


@dataclass
class MotoStack:
    """The template's resources, each created in the moto server at ``endpoint`` when a function's
    environment first names it."""

    template: Mapping[str, Any]
    endpoint: str
    stack_name: str = "GpuwardenStack"
    #: the random part of CloudFormation's generated names (two stacks in one moto never collide)
    suffix: str = field(default_factory=lambda: secrets.token_hex(6).upper())
    #: logical id -> its Ref value and attributes, once stood up
    made: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    def environment(self, fn: DeployedFunction) -> dict[str, str]:
        """The function's environment as Lambda would hand it over: every reference resolved."""
        return {name: self.resolve(value, where=f"{fn.logical_id} {name}") for name, value in fn.environment.items()}

    # ------------------------------------------------------------------ intrinsics

    def resolve(self, value: Any, *, where: str) -> str:
        if isinstance(value, str):
            return value
        if isinstance(value, int | float | bool):
            return json.dumps(value)
        if isinstance(value, dict) and len(value) == 1:
            ((key, arg),) = value.items()
            if key == "Ref":
                return self._ref(str(arg), where)
            if key == "Fn::GetAtt":
                logical_id, attribute = arg if isinstance(arg, list) else str(arg).split(".", 1)
                return self._attribute(logical_id, attribute, where)
            if key == "Fn::Join":
                separator, parts = arg
                return str(separator).join(self.resolve(part, where=where) for part in parts)
        raise CannotStandUp(f"{where}: cannot resolve {json.dumps(value)[:200]}")

    def _ref(self, logical_id: str, where: str) -> str:
        pseudo = {
            "AWS::Region": REGION,
            "AWS::AccountId": ACCOUNT,
            "AWS::Partition": "aws",
            "AWS::URLSuffix": "amazonaws.com",
            "AWS::StackName": self.stack_name,
        }
        if logical_id in pseudo:
            return pseudo[logical_id]
        return self._stand_up(logical_id, where)[0]

    def _attribute(self, logical_id: str, attribute: str, where: str) -> str:
        attributes = self._stand_up(logical_id, where)[1]
        if attribute not in attributes:
            raise CannotStandUp(f"{where}: {logical_id} has no attribute {attribute} here ({sorted(attributes)})")
        return attributes[attribute]

    def _stand_up(self, logical_id: str, where: str) -> tuple[str, dict[str, str]]:
        if logical_id not in self.made:
            resource = self.template["Resources"].get(logical_id)
            if resource is None:
                raise CannotStandUp(f"{where}: {logical_id} is not in the template")
            make = _MAKERS.get(resource["Type"])
            if make is None:
                raise CannotStandUp(f"{where}: the benchmark cannot stand up {resource['Type']} ({logical_id})")
            self.made[logical_id] = make(self, logical_id, resource.get("Properties", {}), where)
        return self.made[logical_id]

    def client(self, service: str) -> Any:
        import boto3

        return boto3.session.Session(aws_access_key_id="bench", aws_secret_access_key="bench").client(
            service, region_name=REGION, endpoint_url=self.endpoint
        )

    def arn(self, service: str, resource: str) -> str:
        return f"arn:aws:{service}:{REGION}:{ACCOUNT}:{resource}"

    def physical_name(self, logical_id: str) -> str:
        """CloudFormation's generated name: stack, logical id, a random suffix."""
        return f"{self.stack_name}-{logical_id}-{self.suffix}"


# ---------------------------------------------------------------------- one maker per type


def _parameter(stack: MotoStack, logical_id: str, props: Mapping[str, Any], where: str) -> tuple[str, dict[str, str]]:
    name = str(props.get("Name") or f"CFN-{logical_id}-{stack.suffix}")
    stack.client("ssm").put_parameter(
        Name=name,
        Type=props.get("Type", "String"),
        Value=stack.resolve(props["Value"], where=where),
        Tier=props.get("Tier", "Standard"),
        Overwrite=True,
    )
    return name, {}


def _table(stack: MotoStack, logical_id: str, props: Mapping[str, Any], where: str) -> tuple[str, dict[str, str]]:
    name = str(props.get("TableName") or stack.physical_name(logical_id))
    dynamodb = stack.client("dynamodb")
    keys = ("KeySchema", "AttributeDefinitions", "BillingMode", "GlobalSecondaryIndexes", "LocalSecondaryIndexes")
    dynamodb.create_table(TableName=name, **{k: props[k] for k in keys if k in props})
    ttl = props.get("TimeToLiveSpecification")
    if ttl:
        dynamodb.update_time_to_live(TableName=name, TimeToLiveSpecification=ttl)
    return name, {"Arn": stack.arn("dynamodb", f"table/{name}")}


def _state_machine(
    stack: MotoStack, logical_id: str, props: Mapping[str, Any], where: str
) -> tuple[str, dict[str, str]]:
    name = str(props.get("StateMachineName") or stack.physical_name(logical_id))
    made = stack.client("stepfunctions").create_state_machine(
        name=name,
        definition=stack.resolve(props["DefinitionString"], where=where),
        roleArn=stack.resolve(props["RoleArn"], where=where),
    )
    arn = str(made["stateMachineArn"])
    return arn, {"Arn": arn, "Name": name}


def _schedule_group(
    stack: MotoStack, logical_id: str, props: Mapping[str, Any], where: str
) -> tuple[str, dict[str, str]]:
    name = str(props.get("Name") or stack.physical_name(logical_id))
    arn = stack.client("scheduler").create_schedule_group(Name=name)["ScheduleGroupArn"]
    return name, {"Arn": str(arn)}


def _queue(stack: MotoStack, logical_id: str, props: Mapping[str, Any], where: str) -> tuple[str, dict[str, str]]:
    name = str(props.get("QueueName") or stack.physical_name(logical_id))
    url = str(stack.client("sqs").create_queue(QueueName=name)["QueueUrl"])
    return url, {"Arn": stack.arn("sqs", name), "QueueName": name, "QueueUrl": url}


def _named_only(service: str, kind: str) -> Callable[..., tuple[str, dict[str, str]]]:
    """A resource the functions only name (a role to pass, a function to target): its ARN."""

    def make(stack: MotoStack, logical_id: str, props: Mapping[str, Any], where: str) -> tuple[str, dict[str, str]]:
        name = stack.physical_name(logical_id)
        arn = f"arn:aws:iam::{ACCOUNT}:role/{name}" if service == "iam" else stack.arn(service, f"{kind}:{name}")
        return name, {"Arn": arn}

    return make


_MAKERS: dict[str, Callable[[MotoStack, str, Mapping[str, Any], str], tuple[str, dict[str, str]]]] = {
    "AWS::SSM::Parameter": _parameter,
    "AWS::DynamoDB::Table": _table,
    "AWS::StepFunctions::StateMachine": _state_machine,
    "AWS::Scheduler::ScheduleGroup": _schedule_group,
    "AWS::SQS::Queue": _queue,
    "AWS::IAM::Role": _named_only("iam", "role"),
    "AWS::Lambda::Function": _named_only("lambda", "function"),
}


@contextmanager
def moto_server() -> Iterator[str]:
    """A moto server in this process (the functions under test are other processes): its URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on the bench's stderr
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


if __name__ == "__main__":  # the synth's child process: `python -m tests.bench.deployed CONTEXT_JSON`
    print(json.dumps(_synthesize_here(json.loads(sys.argv[1]))))
