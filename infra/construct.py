"""`Gpuwarden`: the whole of gpuwarden for one cluster, as one construct a team adds to its own CDK
app (docs/deploy.md, "In your own CDK app"). The repository's own app (infra/app.py) is one stack
holding one of these.

    Gpuwarden(stack, "Gpuwarden", cluster=cluster, policy={"alerts": {"LowGPUUtilization": "gpu-idle"}})

``cluster`` is an ``aws_eks`` / ``aws_eks_v2`` cluster object (of this app, or imported) or the
cluster's name; ``policy`` is gpuwarden's policy (a mapping, YAML/JSON text, or a file's path with
``policy_file``); the other properties are the context settings of ``cdk deploy -c …``
(infra/config.py), typed. Everything is validated as ``-c`` values are: a value gpuwarden does
not understand fails the synth, naming the property.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol, cast

from aws_cdk import CfnOutput, Stack, Token
from constructs import Construct, Node

from gpuwarden.domain.policy import section_of
from gpuwarden.kinds.budget_window import NodePoolWindowsPolicy
from gpuwarden.kinds.gpu_idle.policy import GpuIdlePolicy
from infra.components import cloud_permissions, event_rules, functions
from infra.components.alarms import AlarmSink
from infra.components.bundling import FUNCTIONS_DIR
from infra.components.cluster_access import ClusterRbac
from infra.components.dashboard import Dashboard
from infra.components.drain_workflow import DrainWorkflow
from infra.components.encryption import StackKey
from infra.components.event_rules import EventRoutes
from infra.components.functions import Functions
from infra.components.gpu_idle import GpuIdleReclaim
from infra.components.gpu_signals import GpuSignals
from infra.components.naming import NAME_PREFIX
from infra.components.network import FunctionNetwork
from infra.components.policy_parameter import PolicyParameter
from infra.components.runbook_documents import RunbookDocuments
from infra.components.runtime_layer import RuntimeLayer
from infra.components.schedules import BudgetWindowSchedules
from infra.components.state_table import StateTable
from infra.config import DEFAULT_INTERRUPTION_CONCURRENCY, Settings, SettingsError

DRAIN_STATE_MACHINE_ENV = "GPUWARDEN_DRAIN_STATE_MACHINE_ARN"
#: `-c mode=observe`: the functions' settings (gpuwarden.config: observe implies DRY_RUN)
OBSERVE_ENVIRONMENT = {"GPUWARDEN_MODE": "observe", "DRY_RUN": "true"}
#: the id under which a stack holds its one gpuwarden without changing any logical id
#: (CDK leaves a path component named "Default" out of logical ids)
DEFAULT_ID = "Default"


class NamedCluster(Protocol):
    """What gpuwarden reads of a cluster object: ``aws_eks.ICluster`` and ``aws_eks_v2.ICluster`` both fit."""

    @property
    def cluster_name(self) -> str: ...


def cluster_name(cluster: str | NamedCluster) -> str:
    """The cluster's name as a plain string: gpuwarden writes it into IAM condition keys, the policy
    and alarm queries, where CloudFormation takes no token. A cluster object whose name CloudFormation
    would generate has none at synth time: give it ``cluster_name=…``."""
    if isinstance(cluster, str):
        return cluster
    # a cluster of this app: the name it was given (Resource.physicalName, the CfnCluster's `name`)
    given = getattr(cluster, "_physical_name", None)
    default_child = cluster.node.default_child if isinstance(cluster, Construct) else None
    for name in (cluster.cluster_name, given, getattr(default_child, "name", None)):
        if isinstance(name, str) and not Token.is_unresolved(name):
            return name
    raise SettingsError(
        "Gpuwarden: the cluster's name is not known at synth time (CloudFormation would generate it); "
        "give the cluster an explicit cluster_name, or pass the name as cluster='…'"
    )


class _Values:
    """Typed properties read through the same validation as ``-c`` context values."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        self._values = values

    def try_get_context(self, key: str) -> Any:
        return self._values.get(key)


class Gpuwarden(Construct):
    """gpuwarden for one EKS cluster: functions, rules, drain workflow, schedules, alarms, dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: str | NamedCluster,
        policy: Mapping[str, Any] | str | None = None,
        policy_file: str = "",
        alarm_email: str = "",
        alarm_topic_arn: str = "",
        vpc_id: str = "",
        subnet_ids: Sequence[str] = (),
        security_group_ids: Sequence[str] = (),
        fleet_role_arn: str = "",
        cluster_access: bool = True,
        customer_managed_key: bool = False,
        interruption_concurrency: int = DEFAULT_INTERRUPTION_CONCURRENCY,
        mode: str = "act",
        lambda_architecture: str = "x86_64",
        skip_bundling: bool = False,
        settings: Settings | None = None,
    ) -> None:
        """``settings``: already validated (the repository's app reads them from ``-c`` context);
        then the other properties but ``cluster`` are not read."""
        name = cluster_name(cluster)
        if not FUNCTIONS_DIR.is_dir():
            raise SettingsError(
                f"Gpuwarden: no gpuwarden source checkout at {FUNCTIONS_DIR.parent}: the construct bundles the "
                "Lambda code and layer from it; install with `pip install -e <checkout>[cdk]` (docs/deploy.md)"
            )
        if settings is None:
            values = {
                "cluster": name,
                "policy": dict(policy) if isinstance(policy, Mapping) else policy,
                "policyFile": policy_file,
                "alarmEmail": alarm_email,
                "alarmTopicArn": alarm_topic_arn,
                "vpcId": vpc_id,
                "subnetIds": list(subnet_ids),
                "securityGroupIds": list(security_group_ids),
                "fleetRoleArn": fleet_role_arn,
                "clusterAccess": cluster_access,
                "customerManagedKey": customer_managed_key,
                "interruptionConcurrency": interruption_concurrency,
                "mode": mode,
                "lambdaArchitecture": lambda_architecture,
                "gpuwardenSkipBundling": skip_bundling,
            }
            settings = Settings.from_context(cast(Node, _Values(values)))  # reads only try_get_context
        elif settings.cluster != name:
            raise SettingsError(f"Gpuwarden: cluster {name!r} is not the settings' cluster {settings.cluster!r}")
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        if construct_id != DEFAULT_ID:  # one of several in a team's stack: names of its own (naming.py)
            self.node.set_context(NAME_PREFIX, f"{stack.stack_name}-{construct_id}")
        if isinstance(cluster, Construct):
            self.node.add_dependency(cluster)  # access entries and RBAC need the cluster to exist first
        self.settings = settings
        self._build(settings, skip_bundling=settings.skip_bundling or not stack.bundling_required)

    def _build(self, settings: Settings, *, skip_bundling: bool) -> None:
        # `cdk ls` / `cdk destroy` ask for no bundling (aws:cdk:bundling-stacks): then the layer is not
        # built either, so those commands work without a wheel cache
        # first: every store below looks the key up (infra/components/encryption.py)
        self.key = StackKey(self).key if settings.customer_managed_key else None
        alarms = AlarmSink(self, "Alarms", topic_arn=settings.alarm_topic_arn, email=settings.alarm_email)
        network = FunctionNetwork(self, "Network", network=settings.network) if settings.network else None
        self.state = StateTable(self, "State")
        self.policy = PolicyParameter(self, "Policy", policy_json=settings.policy_json)
        self.layer = RuntimeLayer(
            self,
            "RuntimeLayer",
            architecture=settings.lambda_architecture,
            skip_bundling=skip_bundling,
        )
        self.functions = Functions(
            self,
            "Functions",
            layer=self.layer.layer,
            architecture=settings.lambda_architecture,
            cluster=settings.cluster,
            table=self.state.table,
            policy_parameter=self.policy.parameter,
            alarms=alarms,
            skip_bundling=skip_bundling,
            network=network,
            cluster_access=settings.cluster_access,
            policy_version=self.policy.version,
        )
        if settings.mode == "observe":  # before any function is added: every one plans and writes nothing
            self.functions.environment.update(OBSERVE_ENVIRONMENT)
        # --- cluster access: access entries (functions.py) + the RBAC, applied at deploy time
        if settings.cluster_access:
            self.cluster_rbac = ClusterRbac(
                self,
                "ClusterAccess",
                cluster=settings.cluster,
                allow_exec=settings.policy.checkpoint.allow_exec,
                code=self.functions.code,
                layer=self.layer.layer,
                architecture=self.functions.architecture,
                network=network,
                l1_reason=functions.L1_REASON,
            )
        self.dashboard = Dashboard(self, "Observability", alarms=alarms)

        # --- drain: a Step Functions loop around drain_step
        drain = self.functions.add(functions.DRAIN)
        self.drain = DrainWorkflow(self, "DrainWorkflow", drain_step=drain.function, alarms=alarms)

        # --- EC2 interruption, rebalance and state-change events
        interruption = self.functions.add(
            replace(functions.INTERRUPTION, reserved_concurrency=settings.interruption_concurrency)
        )
        interruption.function.add_environment(DRAIN_STATE_MACHINE_ENV, self.drain.state_machine.state_machine_arn)
        self.drain.state_machine.grant_start_execution(interruption.role)
        self._allow_replacement(interruption)
        self.routes = EventRoutes(self, "Events", alarms=alarms)
        policy = settings.policy  # what is switched off in it gets no rule, alarm or schedule
        for rule in event_rules.kind_rules("interruption", policy):
            self.routes.route(rule, interruption.function)

        # --- runbook: direct invoke (CLI --remote, SSM Automation documents); IAM as interruption
        runbook = self.functions.add(functions.RUNBOOK)
        runbook.function.add_environment(DRAIN_STATE_MACHINE_ENV, self.drain.state_machine.state_machine_arn)
        self.drain.state_machine.grant_start_execution(runbook.role)
        self._allow_replacement(runbook)
        self.runbook_documents = RunbookDocuments(self, "Runbook", function=runbook.function)

        # --- the GPU function: GPU-idle reclaim and the GPU signals, each while switched on
        self.gpu_idle, self.gpu_signals = self._gpu(settings, alarms)

        # --- budget windows (Scheduler ticks) and AWS Health scheduled maintenance (infra/components/schedules.py)
        windows_fn = self.functions.add(functions.WINDOWS)
        maintenance_fn = self.functions.add(functions.MAINTENANCE)
        for fn in (windows_fn, maintenance_fn):  # both may drain a node (a plan due, or no window fits)
            fn.function.add_environment(DRAIN_STATE_MACHINE_ENV, self.drain.state_machine.state_machine_arn)
            self.drain.state_machine.grant_start_execution(fn.role)
            self._allow_replacement(fn)
            cloud_permissions.describe_capacity_blocks(fn)  # Capacity Block plans: end dates, the reconcile
        for rule in event_rules.kind_rules("planning", policy):  # scheduled maintenance, Capacity Blocks delivered
            self.routes.route(rule, maintenance_fn.function)
        self.schedules = BudgetWindowSchedules(
            self,
            "Schedules",
            windows=settings.policy.windows if section_of(policy, NodePoolWindowsPolicy).enabled else (),
            target=windows_fn,
            planners=(windows_fn, maintenance_fn),
            alarms=alarms,
        )

        self.alarms = alarms
        self._outputs(alarms)

    def _outputs(self, alarms: AlarmSink) -> None:
        for name, fn in self.functions.by_name.items():
            CfnOutput(self, f"{name}FunctionName", value=fn.function.function_name)
            CfnOutput(self, f"{name}RoleArn", value=fn.role.role_arn, description="map to a Kubernetes identity")
        CfnOutput(self, "DrainStateMachineArn", value=self.drain.state_machine.state_machine_arn)
        CfnOutput(self, "StateTableName", value=self.state.table.table_name)
        CfnOutput(self, "PolicyParameterName", value=self.policy.parameter.parameter_name)
        CfnOutput(self, "DashboardName", value=self.dashboard.dashboard.dashboard_name)
        if alarms.topic is not None:
            CfnOutput(self, "AlarmTopicArn", value=alarms.topic.topic_arn, description="subscribe Slack/e-mail here")

    def _gpu(self, settings: Settings, alarms: AlarmSink) -> tuple[GpuIdleReclaim | None, GpuSignals | None]:
        """The GPU function, while GPU-idle reclaim (its fleet alarm and rules: infra/components/gpu_idle.py)
        or the GPU signals (the GPU-health scan's schedule, the Alertmanager topic:
        infra/components/gpu_signals.py) are switched on; nothing of either while it is off."""
        policy = settings.policy
        gpu_health = policy.gpu_health.enabled
        gpu_topic = gpu_health or bool(policy.alerts)
        idle_on = section_of(policy, GpuIdlePolicy).enabled
        gpu_fn = self.functions.add(functions.GPU_IDLE) if idle_on or gpu_topic else None
        gpu_idle = (
            GpuIdleReclaim(
                self,
                "GpuIdle",
                fn=gpu_fn,
                routes=self.routes,
                cluster=settings.cluster,
                policy=section_of(policy, GpuIdlePolicy),
                drain=self.drain.state_machine,
                drain_env=DRAIN_STATE_MACHINE_ENV,
            )
            if gpu_fn is not None and idle_on
            else None
        )
        if gpu_fn is not None:
            self._allow_replacement(gpu_fn)  # gpu-unhealthy launches replacements as Spot does
            if gpu_idle is None:  # the GPU signals' drains go to the workflow too
                gpu_fn.function.add_environment(DRAIN_STATE_MACHINE_ENV, self.drain.state_machine.state_machine_arn)
                self.drain.state_machine.grant_start_execution(gpu_fn.role)
            signals = GpuSignals(self, "GpuSignals", fn=gpu_fn, scan=gpu_health, topic=gpu_topic, alarms=alarms)
            return gpu_idle, signals
        return gpu_idle, None

    def _allow_replacement(self, fn: functions.GpuwardenFunction) -> None:
        """Resolve instance → node and launch replacements (docs/cluster.md), this cluster's only."""
        cloud_permissions.describe_capacity(fn)
        cloud_permissions.scale_node_groups(fn, self.settings.cluster)
        template = self.settings.policy.replacement.fleet_launch_template
        if template:  # EC2 Fleet permissions only when the policy names a launch template
            cloud_permissions.launch_fleet(fn, self.settings.cluster, template, self.settings.fleet_role_arn)
