"""Karpenter and aws-node-termination-handler as their charts install them, for doctor's scenarios."""

from __future__ import annotations

from sim.actors.karpenter.objects import Obj


def karpenter_deployment(
    queue: str | None = "ml-prod", namespace: str = "kube-system", setting: str = "env", version: str = "1.8.0"
) -> Obj:
    """Karpenter's controller Deployment as its Helm chart renders it; ``queue`` is
    ``settings.interruptionQueue``, given as the ``INTERRUPTION_QUEUE`` env var (``setting="env"``,
    v0.32+) or the ``--interruption-queue`` flag (``"flag"``). For the v0.19-v0.31 ConfigMap, create
    :func:`karpenter_global_settings` beside a Deployment made with ``queue=None``."""
    labels = {"app.kubernetes.io/name": "karpenter", "app.kubernetes.io/instance": "karpenter"}
    env = [{"name": "CLUSTER_NAME", "value": "ml-prod"}, {"name": "BATCH_MAX_DURATION", "value": "10s"}]
    args: list[str] = []
    if queue and setting == "env":
        env.append({"name": "INTERRUPTION_QUEUE", "value": queue})
    elif queue:
        args.append(f"--interruption-queue={queue}")
    container: Obj = {"name": "controller", "image": f"public.ecr.aws/karpenter/controller:{version}", "env": env}
    if args:
        container["args"] = args
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "karpenter", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }


def karpenter_global_settings(queue: str, namespace: str = "kube-system") -> Obj:
    """The v0.19-v0.31 settings ConfigMap naming the interruption queue."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "karpenter-global-settings", "namespace": namespace},
        "data": {"aws.clusterName": "ml-prod", "aws.interruptionQueueName": queue},
    }


def termination_handler(kind: str = "DaemonSet", namespace: str = "kube-system") -> Obj:
    """aws-node-termination-handler as its chart renders it: a DaemonSet (IMDS mode) or a Deployment (queue mode)."""
    labels = {"app.kubernetes.io/name": "aws-node-termination-handler", "app.kubernetes.io/instance": "nth"}
    container = {
        "name": "aws-node-termination-handler",
        "image": "public.ecr.aws/aws-ec2/aws-node-termination-handler:v1.25.1",
        "env": [{"name": "ENABLE_SPOT_INTERRUPTION_DRAINING", "value": "true"}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": "aws-node-termination-handler", "namespace": namespace, "labels": labels},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    }
