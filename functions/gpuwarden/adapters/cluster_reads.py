"""Read-only cluster and account access for `gpuwarden doctor`: GETs, LISTs and access reviews.

It reuses the Kubernetes adapter's transport (retries, auth, timeouts) and adds only reads; a
SelfSubjectAccessReview is a question to the authorizer, nothing is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from gpuwarden.adapters.kube import KubeClient
from gpuwarden.domain.errors import CloudError, KubeError, NotFound


class ClusterReads(KubeClient):
    """The doctor's read port on a configured `kubernetes.client.ApiClient`."""

    @property
    def server(self) -> str:
        return str(getattr(self._api.configuration, "host", "") or "the API server")

    def access_review(self, group: str, resource: str, subresource: str, verb: str) -> tuple[bool, str]:
        """May the caller ``verb`` ``group``/``resource``[/``subresource``] (cluster-wide)? (allowed, reason)"""
        attributes = {"group": group, "resource": resource, "verb": verb}
        if subresource:
            attributes["subresource"] = subresource
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attributes},
        }
        answer = self._json("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", body=body)
        status = answer.get("status") or {}
        return bool(status.get("allowed")), str(status.get("reason") or status.get("evaluationError") or "")

    def list_deployments(self, label_selector: str) -> list[dict[str, Any]]:
        """Deployments in every namespace matching ``label_selector``."""
        return self._items("/apis/apps/v1/deployments", label_selector)

    def get_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._json("GET", f"/api/v1/namespaces/{quote(namespace)}/configmaps/{quote(name)}")
        except NotFound:
            return None

    def list_all_pods(self) -> list[dict[str, Any]]:
        return self._items("/api/v1/pods")

    def list_node_objects(self) -> list[dict[str, Any]]:
        return self._items("/api/v1/nodes")


def reads_on(build_client: Callable[[], Any], where: str) -> ClusterReads:
    """The doctor's reads on the client ``build_client`` makes; a client that cannot be built
    (no kubeconfig, no credentials, no region) is a KubeError naming ``where`` and why."""
    from botocore.exceptions import BotoCoreError, ClientError
    from kubernetes.config import ConfigException

    try:
        client = build_client()
    except (OSError, ValueError, TypeError, ConfigException, BotoCoreError, ClientError) as err:
        raise KubeError(f"{where}: {type(err).__name__}: {err}") from err
    return ClusterReads(client, attempts=3)


def cluster_has_gpu_metric(region: str | None, cluster: str, metric: str = "node_gpu_utilization") -> bool:
    """Does CloudWatch hold ``metric`` (Container Insights) for ``cluster``? (ListMetrics: the last 2 weeks)"""
    from botocore.exceptions import BotoCoreError, ClientError

    from gpuwarden.adapters.sdk import client

    try:
        pages = (
            client("cloudwatch", region)
            .get_paginator("list_metrics")
            .paginate(
                Namespace="ContainerInsights",
                MetricName=metric,
                Dimensions=[{"Name": "ClusterName", "Value": cluster}],
            )
        )
        return any(page.get("Metrics") for page in pages)
    except (BotoCoreError, ClientError) as err:
        raise CloudError(f"CloudWatch ListMetrics {metric}: {err}") from err
