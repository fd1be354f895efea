"""Cluster access at deploy time: EKS access entries and the gpuwarden RBAC.

- Every gpuwarden function role gets an access entry (type STANDARD) in the Kubernetes group
  ``gpuwarden`` (:func:`function_access_entry`, called by functions.py).
- The RBAC that group needs (a ClusterRole + ClusterRoleBinding rendered by
  ``gpuwarden.services.doctor.rbac`` from one table) is applied by a custom resource: a small Lambda
  (``gpuwarden.handlers.cluster_access``: EKS token from its role, the kube adapter, no kubectl)
  behind a CDK ``custom_resources.Provider``. Create/Update apply, Delete removes.
- That installer is the only principal with more: its access entry carries
  AmazonEKSClusterAdminPolicy, because Kubernetes only lets a principal create a ClusterRole that
  grants what it already holds (or with ``escalate``/``bind``, which are as strong).
"""

from __future__ import annotations

import json

from aws_cdk import Acknowledgment, CustomResource, Duration, Stack, Validations
from aws_cdk import aws_eks as eks
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from gpuwarden.services.doctor import rbac
from infra.components.acknowledge import checkov_skip
from infra.components.encryption import acknowledge_aws_keys, environment_key, log_group_key, stack_key
from infra.components.network import FunctionNetwork, acknowledge_outside_vpc
from infra.components.runtime_layer import LAMBDA_RUNTIME

KUBERNETES_GROUP = rbac.GROUP
INSTALLER_HANDLER = "gpuwarden.handlers.cluster_access.handler"
CLUSTER_ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
RESOURCE_TYPE = "Custom::GpuwardenClusterRbac"

INSTALLER_DLQ_REASON = (
    "Invoked synchronously by the CDK custom-resource framework during deploy and destroy; a Lambda DLQ only "
    "receives asynchronous invocations. A failure fails the CloudFormation operation (stack event, rollback)."
)
FRAMEWORK_DLQ_REASON = (
    "CDK's custom-resource framework function: CloudFormation invokes it once per deploy/destroy and waits for "
    "its answer on the response URL; an error is reported to CloudFormation as FAILED (stack event, rollback), "
    "so there is no lost event for a DLQ to keep."
)
FRAMEWORK_VPC_REASON = (
    "CDK's custom-resource framework function calls only the Lambda API (the installer) and CloudFormation's "
    "S3 response URL; it never talks to the cluster, so it needs no VPC even when the installer has one."
)
FRAMEWORK_ENVIRONMENT_REASON = (
    "CDK's custom-resource framework function: its only environment variable is the installer function's ARN "
    "(USER_ON_EVENT_FUNCTION_ARN), encrypted at rest with the AWS-managed aws/lambda key; context "
    "customerManagedKey=true encrypts it with the stack's key."
)


def cluster_arn(scope: Construct, cluster: str) -> str:
    return Stack.of(scope).format_arn(service="eks", resource="cluster", resource_name=cluster)


def function_access_entry(scope: Construct, cluster: str, role: iam.IRole) -> eks.CfnAccessEntry:
    """Map a gpuwarden function role to the Kubernetes group ``gpuwarden`` (no access policy)."""
    return eks.CfnAccessEntry(
        scope,
        "AccessEntry",
        cluster_name=cluster,
        principal_arn=role.role_arn,
        type="STANDARD",
        kubernetes_groups=[KUBERNETES_GROUP],
    )


class ClusterRbac(Construct):
    """The installer function, its access entry, the Provider and the custom resource."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        cluster: str,
        allow_exec: bool,
        code: lambda_.Code,
        layer: lambda_.ILayerVersion,
        architecture: lambda_.Architecture,
        network: FunctionNetwork | None,
        l1_reason: str,
    ) -> None:
        super().__init__(scope, construct_id)
        self.documents = rbac.documents(allow_exec=allow_exec)
        stack = Stack.of(self)
        self.role = iam.Role(
            self,
            "InstallerRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="gpuwarden cluster-access installer (applies the gpuwarden ClusterRole at deploy time)",
        )
        self.role.add_to_policy(
            iam.PolicyStatement(sid="EksToken", actions=["eks:DescribeCluster"], resources=[cluster_arn(self, cluster)])
        )
        log_group = logs.LogGroup(self, "InstallerLogs", retention=logs.RetentionDays.ONE_MONTH, **log_group_key(self))
        log_group.grant_write(self.role)
        self.installer = lambda_.Function(
            self,
            "Installer",
            description="gpuwarden: apply/remove the gpuwarden ClusterRole and binding (custom resource)",
            runtime=LAMBDA_RUNTIME,
            architecture=architecture,
            handler=INSTALLER_HANDLER,
            code=code,
            layers=[layer],
            memory_size=256,
            timeout=Duration.minutes(5),  # waits up to 3 min for a new access entry to reach the API server
            environment={
                "POWERTOOLS_SERVICE_NAME": "gpuwarden-cluster-access",
                "POWERTOOLS_METRICS_NAMESPACE": "Gpuwarden",
            },
            log_group=log_group,
            role=self.role,
            reserved_concurrent_executions=1,  # one custom resource, applied once per deploy or destroy
            **(network.function_options() if network else {}),
            **environment_key(self),
        )
        checkov_skip(self.installer, "CKV_AWS_116", INSTALLER_DLQ_REASON)
        if network is None:
            acknowledge_outside_vpc(self.installer)
        acknowledge_aws_keys(log_group, self.installer)
        Validations.of(self.installer).acknowledge(Acknowledgment(id="AwsSolutions::AwsSolutions-L1", reason=l1_reason))
        if network:
            FunctionNetwork.allow_enis(self.role)
        self.access_entry = eks.CfnAccessEntry(
            self,
            "InstallerAccessEntry",
            cluster_name=cluster,
            principal_arn=self.role.role_arn,
            type="STANDARD",
            access_policies=[
                eks.CfnAccessEntry.AccessPolicyProperty(
                    policy_arn=f"arn:{stack.partition}:eks::aws:cluster-access-policy/{CLUSTER_ADMIN_POLICY}",
                    access_scope=eks.CfnAccessEntry.AccessScopeProperty(type="cluster"),
                )
            ],
        )

        framework_role = iam.Role(
            self,
            "ProviderRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="gpuwarden cluster-access custom resource framework (invokes the installer)",
        )
        framework_logs = logs.LogGroup(
            self, "ProviderLogs", retention=logs.RetentionDays.ONE_MONTH, **log_group_key(self)
        )
        acknowledge_aws_keys(framework_logs)
        framework_logs.grant_write(framework_role)
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=self.installer,
            framework_on_event_role=framework_role,
            log_group=framework_logs,
        )
        self._answer_checkov_on_framework(framework_role)
        Validations.of(framework_role).acknowledge(
            Acknowledgment(
                id=f"AwsSolutions::AwsSolutions-IAM5[Resource::<{stack.get_logical_id(self.installer.node.default_child)}.Arn>:*]",  # type: ignore[arg-type]
                reason=(
                    "Added by the CDK Provider framework: lambda:InvokeFunction on the installer function's "
                    "versions/aliases (its ARN with :*), that one function only."
                ),
            ),
        )
        self.resource = CustomResource(
            self,
            "Rbac",
            service_token=self.provider.service_token,
            resource_type=RESOURCE_TYPE,
            properties={"ClusterName": cluster, "Documents": json.dumps(self.documents, sort_keys=True)},
        )
        self.resource.node.add_dependency(self.access_entry)

    def _answer_checkov_on_framework(self, framework_role: iam.IRole) -> None:
        """CDK creates the framework's function; its checkov findings are answered here (escape hatch)."""
        function = self.provider.node.find_child("framework-onEvent")
        assert isinstance(function, lambda_.Function)
        cfn = function.node.default_child
        assert isinstance(cfn, lambda_.CfnFunction)
        cfn.reserved_concurrent_executions = 1  # CloudFormation calls it once per custom-resource operation
        checkov_skip(function, "CKV_AWS_116", FRAMEWORK_DLQ_REASON)
        acknowledge_outside_vpc(function, FRAMEWORK_VPC_REASON)
        key = stack_key(self)
        if key is None:
            checkov_skip(function, "CKV_AWS_173", FRAMEWORK_ENVIRONMENT_REASON)
        else:
            cfn.kms_key_arn = key.key_arn
            key.grant_decrypt(framework_role)
