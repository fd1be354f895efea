"""Builders for realistic objects: EKS GPU nodes under Karpenter, their pods and owners.

Every builder returns a plain dict ready for ``KubeSim.create``. Owner references need the
owner's uid: pass the stored owner (what ``sim.create`` returned) as ``owner``; without one a
stable uid derived from the owner's name is used.
"""

from __future__ import annotations

import hashlib
import ipaddress
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.apiserver.core import KubeSim

Obj = dict[str, Any]

GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "true", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}
CREATED = "2025-01-01T00:00:00Z"


def _region(zone: str) -> str:
    return zone[:-1] if zone[-1].isalpha() else zone


def _ip_for(name: str, base: str = "10.0.0.0/16") -> str:
    net = ipaddress.ip_network(base)
    offset = int(hashlib.sha256(name.encode()).hexdigest(), 16) % (net.num_addresses - 2) + 1
    return str(net.network_address + offset)


def _uid(kind: str, name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kubesim/{kind}/{name}"))


def owner_ref(owner: Obj | tuple[str, str, str], controller: bool = True) -> Obj:
    """An ownerReference to a stored object, or to (apiVersion, kind, name)."""
    if isinstance(owner, tuple):
        api_version, kind, name = owner
        uid = _uid(kind, name)
    else:
        api_version, kind = owner["apiVersion"], owner["kind"]
        name, uid = owner["metadata"]["name"], owner["metadata"].get("uid") or _uid(owner["kind"], name)
    return {
        "apiVersion": api_version,
        "kind": kind,
        "name": name,
        "uid": uid,
        "controller": controller,
        "blockOwnerDeletion": True,
    }


# ------------------------------------------------------------------ nodes and Karpenter


def gpu_node(
    name: str,
    instance_id: str,
    zone: str = "us-west-2a",
    instance_type: str = "p4d.24xlarge",
    nodepool: str | None = "gpu-training",
    capacity_type: str = "spot",
    gpus: int = 8,
    ip: str | None = None,
    gpu_taint: bool = True,
    ready: bool = True,
) -> Obj:
    """A Ready EKS GPU node as Karpenter and the NVIDIA device plugin leave it."""
    ip = ip or _ip_for(name)
    region = _region(zone)
    dns = f"ip-{ip.replace('.', '-')}.{region}.compute.internal"
    labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        "kubernetes.io/hostname": name,
        "node.kubernetes.io/instance-type": instance_type,
        "topology.kubernetes.io/region": region,
        "topology.kubernetes.io/zone": zone,
        "karpenter.sh/capacity-type": capacity_type,
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": str(gpus),
    }
    if nodepool:
        labels |= {
            "karpenter.sh/nodepool": nodepool,
            "karpenter.sh/registered": "true",
            "karpenter.sh/initialized": "true",
            "karpenter.k8s.aws/ec2nodeclass": "default",
        }
    capacity = {"cpu": "96", "memory": "1152Gi", "pods": "737", "ephemeral-storage": "500Gi", GPU: str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"alpha.kubernetes.io/provided-node-ip": ip, "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {
            "providerID": f"aws:///{zone}/{instance_id}",
            **({"taints": [dict(GPU_TAINT)]} if gpu_taint else {}),
        },
        "status": {
            "capacity": capacity,
            "allocatable": dict(capacity),
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
                {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "KubeletReady" if ready else "KubeletNotReady",
                    "message": "kubelet is posting ready status",
                    "lastHeartbeatTime": CREATED,
                    "lastTransitionTime": CREATED,
                },
            ],
            "addresses": [
                {"type": "InternalIP", "address": ip},
                {"type": "InternalDNS", "address": dns},
                {"type": "Hostname", "address": dns},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.32.3-eks",
                "containerRuntimeVersion": "containerd://1.7.27",
                "osImage": "Amazon Linux 2023",
                "kernelVersion": "6.1.132",
                "kubeProxyVersion": "v1.32.3-eks",
                "machineID": hashlib.md5(name.encode(), usedforsecurity=False).hexdigest(),
                "systemUUID": str(_uid("node", name)),
                "bootID": str(_uid("boot", name)),
            },
        },
    }


def nodepool(
    name: str = "gpu-training",
    instance_types: tuple[str, ...] = ("p4d.24xlarge", "p5.48xlarge"),
    capacity_types: tuple[str, ...] = ("spot", "on-demand"),
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2b", "us-west-2c"),
    gpu_limit: int | None = 64,
    budgets: list[Obj] | None = None,
) -> Obj:
    limits: Obj = {"cpu": "1000"}
    if gpu_limit is not None:
        limits[GPU] = str(gpu_limit)
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodePool",
        "metadata": {"name": name},
        "spec": {
            "template": {
                "metadata": {"labels": {"workload": name}},
                "spec": {
                    "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                    "requirements": [
                        {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": list(instance_types)},
                        {"key": "karpenter.sh/capacity-type", "operator": "In", "values": list(capacity_types)},
                        {"key": "topology.kubernetes.io/zone", "operator": "In", "values": list(zones)},
                    ],
                    "taints": [dict(GPU_TAINT)],
                    "expireAfter": "720h",
                },
            },
            "limits": limits,
            "disruption": {
                "consolidationPolicy": "WhenEmptyOrUnderutilized",
                "consolidateAfter": "10m",
                "budgets": budgets if budgets is not None else [{"nodes": "10%"}],
            },
        },
    }


def nodeclaim_for(node: Obj, name: str | None = None) -> Obj:
    """The NodeClaim Karpenter keeps for ``node`` (same pool, type, zone, capacity type)."""
    labels = node["metadata"]["labels"]
    pool = labels.get("karpenter.sh/nodepool", "default")
    claim = name or f"{pool}-{hashlib.sha256(node['metadata']['name'].encode()).hexdigest()[:5]}"
    requirement_keys = ("node.kubernetes.io/instance-type", "karpenter.sh/capacity-type", "topology.kubernetes.io/zone")
    return {
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {
            "name": claim,
            "labels": {
                k: v
                for k, v in labels.items()
                if k.startswith(("karpenter.sh/", "node.kubernetes.io/", "topology.kubernetes.io/"))
            },
            "ownerReferences": [owner_ref(("karpenter.sh/v1", "NodePool", pool), controller=False)],
            "finalizers": ["karpenter.sh/termination"],
        },
        "spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
            "requirements": [
                {"key": k, "operator": "In", "values": [labels[k]]} for k in requirement_keys if k in labels
            ],
            "resources": {"requests": {GPU: node["status"]["capacity"].get(GPU, "0")}},
            "taints": node["spec"].get("taints", []),
        },
        "status": {
            "nodeName": node["metadata"]["name"],
            "providerID": node["spec"]["providerID"],
            "capacity": node["status"]["capacity"],
            "allocatable": node["status"]["allocatable"],
            "conditions": [
                {"type": t, "status": "True", "reason": t, "lastTransitionTime": CREATED}
                for t in ("Launched", "Registered", "Initialized", "Ready")
            ],
        },
    }


# ------------------------------------------------------------------ owners


def _workload(
    api_version: str,
    kind: str,
    name: str,
    namespace: str,
    labels: dict[str, str],
    replicas: int | None,
    extra_spec: Obj | None = None,
    owner: Obj | None = None,
) -> Obj:
    spec: Obj = {
        "selector": {"matchLabels": dict(labels)},
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    }
    if replicas is not None:
        spec["replicas"] = replicas
    spec |= extra_spec or {}
    meta: Obj = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owner is not None:
        meta["ownerReferences"] = [owner_ref(owner)]
    return {"apiVersion": api_version, "kind": kind, "metadata": meta, "spec": spec}


def daemonset(name: str = "nvidia-device-plugin", namespace: str = "kube-system") -> Obj:
    return _workload("apps/v1", "DaemonSet", name, namespace, {"app.kubernetes.io/name": name}, None)


def deployment(name: str, namespace: str, labels: dict[str, str], replicas: int) -> Obj:
    return _workload("apps/v1", "Deployment", name, namespace, labels, replicas)


def replicaset(
    name: str, namespace: str, labels: dict[str, str], replicas: int, deployment_owner: Obj | None = None
) -> Obj:
    return _workload("apps/v1", "ReplicaSet", name, namespace, labels, replicas, owner=deployment_owner)


def statefulset(name: str, namespace: str, labels: dict[str, str], replicas: int) -> Obj:
    return _workload("apps/v1", "StatefulSet", name, namespace, labels, replicas, {"serviceName": name})


def job(name: str, namespace: str = "ml", parallelism: int = 1) -> Obj:
    labels = {"job-name": name, "batch.kubernetes.io/job-name": name}
    obj = _workload(
        "batch/v1",
        "Job",
        name,
        namespace,
        labels,
        None,
        {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 6},
    )
    obj["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    return obj


def pdb(
    name: str,
    namespace: str,
    match_labels: dict[str, str],
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
) -> Obj:
    """A policy/v1 PodDisruptionBudget; set exactly one of min_available / max_unavailable."""
    spec: Obj = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


# ------------------------------------------------------------------ pods


def running_status(node: Obj | None, pod_name: str, containers: list[Obj], ready: bool = True) -> Obj:
    host_ip = node["status"]["addresses"][0]["address"] if node else "10.0.0.1"
    pod_ip = _ip_for(pod_name, "10.0.128.0/17")
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
    resources = {"requests": {GPU: str(gpus), "cpu": "90", "memory": "1000Gi"}, "limits": {GPU: str(gpus)}}
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


# ------------------------------------------------------------------ a whole cluster


@dataclass
class ClusterSummary:
    nodes: list[str] = field(default_factory=list)
    instance_ids: dict[str, str] = field(default_factory=dict)  # node -> instance id
    nodepool: str = ""
    nodeclaims: list[str] = field(default_factory=list)
    daemonset_pods: list[str] = field(default_factory=list)  # "ns/name"
    training_pods: list[str] = field(default_factory=list)
    inference_pods: list[str] = field(default_factory=list)
    pdb: str = ""  # "ns/name"


def gpu_cluster(
    sim: KubeSim,
    nodes: int = 4,
    nodepool_name: str = "gpu-training",
    zones: tuple[str, ...] = ("us-west-2a", "us-west-2b"),
    inference_replicas: int = 3,
    pdb_min_available: int | str = 2,
    training_jobs: int | None = None,
) -> ClusterSummary:
    """Fill ``sim`` with a coherent GPU cluster and return what was made.

    NodePool + one NodeClaim/Node per node (spot, alternating zones); the NVIDIA device plugin
    DaemonSet with a pod on every node; one training Job pod per node on the first
    ``training_jobs`` nodes (default: all but the last); an inference Deployment/ReplicaSet with
    ``inference_replicas`` pods spread over the nodes behind a PDB (``minAvailable``).
    """
    out = ClusterSummary(nodepool=nodepool_name)
    sim.create(nodepool(nodepool_name, zones=zones))
    ds = sim.create(daemonset())
    node_objs = []
    for i in range(nodes):
        name = f"ip-10-0-{i + 1}-{10 + i}.us-west-2.compute.internal"
        instance_id = f"i-0{hashlib.sha256(name.encode()).hexdigest()[:16]}"
        node = sim.create(
            gpu_node(name, instance_id, zone=zones[i % len(zones)], nodepool=nodepool_name, ip=f"10.0.{i + 1}.{10 + i}")
        )
        node_objs.append(node)
        claim = sim.create(nodeclaim_for(node))
        out.nodes.append(name)
        out.instance_ids[name] = instance_id
        out.nodeclaims.append(claim["metadata"]["name"])
        dp = sim.create(daemonset_pod(node, owner=ds))
        out.daemonset_pods.append(f"kube-system/{dp['metadata']['name']}")
    for i, node in enumerate(node_objs[: nodes - 1 if training_jobs is None else training_jobs]):
        job_obj = sim.create(job(f"train-{i}", "ml"))
        tp = sim.create(training_pod(f"train-{i}-worker", node, owner=job_obj))
        out.training_pods.append(f"ml/{tp['metadata']['name']}")
    labels = {"app": "inference"}
    dep = sim.create(deployment("inference", "serving", labels, inference_replicas))
    rs = sim.create(replicaset("inference-6d4cf56db", "serving", labels, inference_replicas, dep))
    for i in range(inference_replicas):
        node = node_objs[i % len(node_objs)]
        suffix = hashlib.sha256(f"inference-{i}".encode()).hexdigest()[:5]
        ip = sim.create(inference_pod(f"inference-6d4cf56db-{suffix}", node, owner=rs))
        out.inference_pods.append(f"serving/{ip['metadata']['name']}")
    sim.create(pdb("inference", "serving", labels, min_available=pdb_min_available))
    out.pdb = "serving/inference"
    return out
