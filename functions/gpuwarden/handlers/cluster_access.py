"""CloudFormation custom resource (CDK ``custom_resources.Provider``): the gpuwarden ClusterRole.

Create/Update apply the rendered ClusterRole + ClusterRoleBinding (group ``gpuwarden``),
Delete removes them. The documents come from the resource's properties (rendered at synth
time by ``services/doctor/rbac.py``), the cluster from ``ClusterName``; the cluster is reached with
an EKS token from this function's role, as every gpuwarden function does (no kubectl).
"""

from __future__ import annotations

import json
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from gpuwarden.config import Settings
from gpuwarden.domain.errors import GpuwardenError, KubeError
from gpuwarden.observability import logger
from gpuwarden.services.doctor import rbac

#: on Delete, how long to wait for access before leaving the RBAC in place (never block a stack delete)
DELETE_WAIT_SECONDS = 30.0


def kube_for(cluster: str) -> rbac.RbacPort:
    from gpuwarden.adapters.eks_auth import eks_api_client
    from gpuwarden.adapters.kube import KubeClient

    region = Settings.from_env().region
    if not region:
        raise GpuwardenError("no AWS region in the environment")
    return KubeClient(eks_api_client(cluster, region))


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    request = str(event["RequestType"])
    props = event["ResourceProperties"]
    cluster = str(props["ClusterName"])
    documents = json.loads(props["Documents"])
    physical_id = f"gpuwarden-rbac/{cluster}"
    if request == "Delete":
        return {"PhysicalResourceId": event.get("PhysicalResourceId", physical_id), "Data": _delete(cluster, documents)}
    done = rbac.install(kube_for(cluster), documents)
    return {"PhysicalResourceId": physical_id, "Data": {"Objects": "; ".join(done)}}


def _delete(cluster: str, documents: list[dict[str, Any]]) -> dict[str, str]:
    """Never leave the stack stuck: a cluster that is gone or no longer lets us in has nothing to remove."""
    from botocore.exceptions import ClientError

    try:
        done = rbac.uninstall(kube_for(cluster), documents, wait_seconds=DELETE_WAIT_SECONDS)
    except ClientError as err:
        if err.response.get("Error", {}).get("Code") != "ResourceNotFoundException":
            raise
        logger.warning("cluster not found: nothing to remove", extra={"cluster": cluster})
        return {"Objects": "cluster not found"}
    except KubeError as err:
        if err.status not in (401, 403):
            raise
        logger.warning("no access to the cluster any more: RBAC left in place", extra={"error": str(err)})
        return {"Objects": f"left in place: {err}"}
    return {"Objects": "; ".join(done)}
