"""EKS GPU nodes under Karpenter: the Node, its NodePool, its NodeClaim."""

from __future__ import annotations

import hashlib

from sim.builders.base import CREATED, GPU, GPU_TAINT, Obj, ip_for, owner_ref, region_of, uid_for

EC2_NODE_CLASS = {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
#: EKS Auto Mode: its nodes' label and its NodeClass (sim/builders/auto_mode.py)
AUTO_MODE_LABEL = "eks.amazonaws.com/compute-type"
AUTO_MODE_NODE_CLASS = {"group": "eks.amazonaws.com", "kind": "NodeClass", "name": "default"}


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
    ip = ip or ip_for(name)
    region = region_of(zone)
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
                "systemUUID": str(uid_for("node", name)),
                "bootID": str(uid_for("boot", name)),
            },
        },
    }


NEURON = "aws.amazon.com/neuron"
NEURON_TAINT = {"key": NEURON, "value": "true", "effect": "NoSchedule"}


def trainium_node(
    name: str,
    instance_id: str,
    zone: str = "us-west-2a",
    nodepool: str | None = "trn-training",
    capacity_type: str = "on-demand",
    devices: int = 16,
    efa: int = 8,
    ready: bool = True,
) -> Obj:
    """A Ready trn1.32xlarge node as Karpenter and the Neuron and EFA device plugins leave it: 16
    Neuron devices (32 NeuronCores) and 8 EFA interfaces in its capacity, Karpenter's
    instance-accelerator-* labels, no NVIDIA label at all."""
    node = gpu_node(
        name, instance_id, zone, "trn1.32xlarge", nodepool, capacity_type, gpus=0, gpu_taint=False, ready=ready
    )
    labels = node["metadata"]["labels"]
    for key in ("nvidia.com/gpu.present", "nvidia.com/gpu.count"):
        labels.pop(key)
    if nodepool:
        labels |= {
            "karpenter.k8s.aws/instance-accelerator-manufacturer": "aws",
            "karpenter.k8s.aws/instance-accelerator-name": "trainium",
            "karpenter.k8s.aws/instance-accelerator-count": str(devices),
        }
    capacity = {k: v for k, v in node["status"]["capacity"].items() if k != GPU}
    capacity |= {"cpu": "128", "memory": "512Gi", NEURON: str(devices), "aws.amazon.com/neuroncore": str(2 * devices)}
    if efa:
        capacity["vpc.amazonaws.com/efa"] = str(efa)
    node["status"]["capacity"] = capacity
    node["status"]["allocatable"] = dict(capacity)
    node["spec"]["taints"] = [dict(NEURON_TAINT)]
    return node


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
            "nodeClassRef": dict(AUTO_MODE_NODE_CLASS if labels.get(AUTO_MODE_LABEL) == "auto" else EC2_NODE_CLASS),
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
