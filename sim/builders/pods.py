"""Pods as the kubelet reports them: running status, DaemonSet and mirror pods, trainers, servers."""

from __future__ import annotations

import hashlib

from sim.builders.base import CREATED, GPU, GPU_TOLERATION, Obj, ip_for, owner_ref


def running_status(node: Obj | None, pod_name: str, containers: list[Obj], ready: bool = True) -> Obj:
    host_ip = node["status"]["addresses"][0]["address"] if node else "10.0.0.1"
    pod_ip = ip_for(pod_name, "10.0.128.0/17")
    state = "True" if ready else "False"
    return {
        "phase": "Running",
        "conditions": [
            {"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": CREATED},
            {"type": "Initialized", "status": "True", "lastTransitionTime": CREATED},
            {"type": "Ready", "status": state, "lastTransitionTime": CREATED},
            {"type": "ContainersReady", "status": state, "lastTransitionTime": CREATED},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": CREATED},
        ],
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": CREATED,
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": c["name"],
                "image": c["image"],
                "imageID": "",
                "ready": ready,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": CREATED}},
                "containerID": f"containerd://{hashlib.sha256((pod_name + c['name']).encode()).hexdigest()}",
            }
            for c in containers
        ],
    }


def pod(
    name: str,
    node: Obj | str | None,
    namespace: str = "default",
    owner: Obj | tuple[str, str, str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[Obj] | None = None,
    grace: int = 30,
    ready: bool = True,
    volumes: list[Obj] | None = None,
    tolerations: list[Obj] | None = None,
) -> Obj:
    """A Running pod bound to ``node`` (a stored node, or just its name)."""
    node_obj = node if isinstance(node, dict) else None
    node_name = node["metadata"]["name"] if isinstance(node, dict) else node
    containers = containers or [{"name": "main", "image": "public.ecr.aws/docker/library/busybox:1.36"}]
    meta: Obj = {
        "name": name,
        "namespace": namespace,
        "labels": dict(labels or {}),
        "annotations": dict(annotations or {}),
    }
    if owner is not None:
        meta["ownerReferences"] = [owner_ref(owner)]
    spec: Obj = {
        "containers": containers,
        "terminationGracePeriodSeconds": grace,
        "restartPolicy": "Always",
        "tolerations": tolerations if tolerations is not None else [dict(GPU_TOLERATION)],
    }
    if node_name:
        spec["nodeName"] = node_name
    if volumes:
        spec["volumes"] = volumes
    status = running_status(node_obj, name, containers, ready) if node_name else {"phase": "Pending"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def daemonset_pod(
    node: Obj | str, owner: Obj | None = None, namespace: str = "kube-system", name: str | None = None
) -> Obj:
    """A DaemonSet pod (default: the NVIDIA device plugin) on ``node``."""
    ds_name = owner["metadata"]["name"] if owner else "nvidia-device-plugin"
    node_name = node["metadata"]["name"] if isinstance(node, dict) else node
    suffix = hashlib.sha256(node_name.encode()).hexdigest()[:5]
    return pod(
        name or f"{ds_name}-{suffix}",
        node,
        namespace,
        owner=owner or ("apps/v1", "DaemonSet", ds_name),
        labels={"app.kubernetes.io/name": ds_name},
        containers=[{"name": "nvidia-device-plugin-ctr", "image": "nvcr.io/nvidia/k8s-device-plugin:v0.17.1"}],
        tolerations=[{"operator": "Exists"}],
    )


def mirror_pod(name: str, node: Obj | str, namespace: str = "kube-system") -> Obj:
    """A static (mirror) pod: the kubelet's, owned by the Node; drain skips it."""
    node_name = node["metadata"]["name"] if isinstance(node, dict) else node
    digest = hashlib.md5(name.encode(), usedforsecurity=False).hexdigest()
    obj = pod(
        f"{name}-{node_name}",
        node,
        namespace,
        owner=("v1", "Node", node_name),
        annotations={
            "kubernetes.io/config.mirror": digest,
            "kubernetes.io/config.hash": digest,
            "kubernetes.io/config.source": "file",
        },
        tolerations=[{"operator": "Exists"}],
    )
    return obj


def training_pod(
    name: str,
    node: Obj | str,
    gpus: int = 8,
    checkpoint: str | None = "signal:SIGUSR1",
    grace: int = 30,
    namespace: str = "ml",
    owner: Obj | tuple[str, str, str] | None = None,
    checkpoint_container: str | None = None,
    checkpoint_timeout: int | None = None,
    labels: dict[str, str] | None = None,
) -> Obj:
    """A GPU training pod (owner: a Job unless given) with optional checkpoint annotations."""
    annotations: dict[str, str] = {}
    if checkpoint:
        annotations["gpuwarden.io/checkpoint"] = checkpoint
    if checkpoint_container:
        annotations["gpuwarden.io/checkpoint-container"] = checkpoint_container
    if checkpoint_timeout is not None:
        annotations["gpuwarden.io/checkpoint-timeout-seconds"] = str(checkpoint_timeout)
    job_name = name.rsplit("-", 1)[0] if "-" in name else name
    # a p4d.24xlarge's share per GPU (96 CPU, 1152 GiB for 8): a node's trainers fit it, as the scheduler placed them
    share = max(gpus, 1)
    resources = {
        "requests": {GPU: str(gpus), "cpu": str(11 * share), "memory": f"{125 * share}Gi"},
        "limits": {GPU: str(gpus)},
    }
    return pod(
        name,
        node,
        namespace,
        owner=owner or ("batch/v1", "Job", job_name),
        labels={"app": "trainer", "job-name": job_name, **(labels or {})},
        annotations=annotations,
        containers=[
            {"name": "trainer", "image": "nvcr.io/nvidia/pytorch:24.12-py3", "resources": resources},
            {"name": "log-shipper", "image": "public.ecr.aws/aws-observability/aws-for-fluent-bit:2.32"},
        ],
        grace=grace,
        volumes=[{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    )


def inference_pod(
    name: str,
    node: Obj | str,
    owner: Obj | None = None,
    namespace: str = "serving",
    labels: dict[str, str] | None = None,
    gpus: int = 1,
    grace: int = 30,
) -> Obj:
    """An inference server pod owned by a ReplicaSet, labelled ``app=inference`` for its PDB."""
    resources = {"requests": {GPU: str(gpus)}, "limits": {GPU: str(gpus)}}
    return pod(
        name,
        node,
        namespace,
        owner=owner or ("apps/v1", "ReplicaSet", "inference-6d4cf56db"),
        labels=labels or {"app": "inference"},
        containers=[
            {
                "name": "server",
                "image": "nvcr.io/nvidia/tritonserver:24.12-py3",
                "resources": resources,
                "ports": [{"containerPort": 8000, "protocol": "TCP"}],
            }
        ],
        grace=grace,
    )
