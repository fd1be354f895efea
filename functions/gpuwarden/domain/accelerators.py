"""Accelerators (docs/gpu-signals.md, "Accelerators"): which extended resources are a node's and a
pod's accelerators, what a pod's DRA ResourceClaims add, and what a replacement can ask Karpenter
for. GPU-idle, the GPU-health scan, gang discovery, replacements and doctor read these alike;
where a figure says "GPU" it counts accelerators. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuwarden.domain.instance_labels import instance_label
from gpuwarden.domain.placement import GPU_NAME_LABEL
from gpuwarden.domain.views import NodeView, PodView
from gpuwarden.domain.wording import count

NVIDIA_GPU = "nvidia.com/gpu"
#: MIG slices, one resource per profile (``nvidia.com/mig-1g.10gb``), with the device plugin's
#: ``mixed`` strategy (``single`` advertises the slices as ``nvidia.com/gpu``).
MIG_PREFIX = "nvidia.com/mig-"
NEURON = "aws.amazon.com/neuron"
NEURONCORE = "aws.amazon.com/neuroncore"
NEURONDEVICE = "aws.amazon.com/neurondevice"
EFA = "vpc.amazonaws.com/efa"
AMD_GPU = "amd.com/gpu"
GAUDI = "habana.ai/gaudi"

#: What Karpenter's AWS instance types advertise, so what a NodeClaim may request
#: (aws/karpenter-provider-aws pkg/providers/instancetype/types.go, ``computeCapacity``). MIG
#: slices, ``neurondevice`` and DRA devices are not among them.
REQUESTABLE = (NVIDIA_GPU, AMD_GPU, NEURON, NEURONCORE, GAUDI, EFA)

#: Karpenter's (AWS provider) labels for an instance's accelerators (pkg/apis/v1/labels.go): GPUs,
#: and the others (Inferentia, Trainium) as "accelerators".
GPU_COUNT_LABEL = "karpenter.k8s.aws/instance-gpu-count"
ACCELERATOR_COUNT_LABEL = "karpenter.k8s.aws/instance-accelerator-count"
ACCELERATOR_NAME_LABEL = "karpenter.k8s.aws/instance-accelerator-name"

#: DRA drivers whose devices are of the GPU family (NVIDIA's k8s-dra-driver-gpu) or the Neuron
#: family (AWS's Neuron DRA driver): which of the labels above keep a replacement's model.
GPU_DRIVERS = ("gpu.nvidia.com",)
NEURON_DRIVERS = ("neuron.aws.com",)


#: The accelerators, as a reason names them.
ACCELERATOR_RESOURCES = (NVIDIA_GPU, MIG_PREFIX + "*", NEURON, NEURONCORE, NEURONDEVICE)


def is_accelerator(resource: str) -> bool:
    return resource in (NVIDIA_GPU, NEURON, NEURONCORE, NEURONDEVICE) or resource.startswith(MIG_PREFIX)


@dataclass(frozen=True)
class Row:
    """One line of the accelerator table (docs/gpu-signals.md prints it)."""

    resource: str
    what: str
    #: counts as an accelerator of the node (allocatable) and of the pod (requests)
    accelerator: bool
    #: what a replacement does with it
    replacement: str


ACCELERATOR_TABLE: tuple[Row, ...] = (
    Row(NVIDIA_GPU, "NVIDIA GPU (or a MIG slice, `single` strategy)", True, "requested"),
    Row(MIG_PREFIX + "<profile>", "MIG slice (`mixed` strategy), each one", True, "keeps instance-gpu-count/-name"),
    Row(NEURON, "Neuron device (Trainium, Inferentia)", True, "requested"),
    Row(NEURONDEVICE, "Neuron device (the device plugin's other name)", True, "keeps instance-accelerator-count/-name"),
    Row(NEURONCORE, "NeuronCore (counted for a node only without a device resource)", True, "requested"),
    Row("DRA ResourceClaim", "each device allocated to the pod (resource.k8s.io/v1)", True, "keeps the node's labels"),
    Row(EFA, "EFA interface (a network device, not an accelerator)", False, "requested"),
    Row(AMD_GPU + ", " + GAUDI, "requested when pods ask (Karpenter advertises them)", False, "requested"),
)


def accelerators_of(resources: Mapping[str, int]) -> dict[str, int]:
    """The accelerator entries of a resource list (extended resources, whole numbers)."""
    return {name: n for name, n in sorted(resources.items()) if n > 0 and is_accelerator(name)}


def device_count(resources: Mapping[str, int]) -> int:
    """How many accelerators a resource list holds: every GPU and MIG slice; Neuron devices (the
    larger of the two names, which the device plugin advertises for the same devices), or the
    NeuronCores where no device resource is given."""
    found = accelerators_of(resources)
    gpus = sum(n for name, n in found.items() if name == NVIDIA_GPU or name.startswith(MIG_PREFIX))
    neuron = max(found.get(NEURON, 0), found.get(NEURONDEVICE, 0)) or found.get(NEURONCORE, 0)
    return gpus + neuron


def node_accelerator_count(node: NodeView) -> int:
    """The node's accelerators (its allocatable count): what one notification's per-GPU alerts
    must cover for a node to be idle."""
    return device_count(node.allocatable)


def is_neuron_node(node: NodeView) -> bool:
    """The node's accelerators are Neuron devices (Trainium, Inferentia) and no GPU: its GPU-idle
    re-check reads Container Insights' NeuronCore utilisation."""
    found = accelerators_of(node.allocatable) or accelerators_of(node.capacity)
    neuron = any(name in (NEURON, NEURONCORE, NEURONDEVICE) for name in found)
    return neuron and not any(name == NVIDIA_GPU or name.startswith(MIG_PREFIX) for name in found)


def is_accelerator_node(node: NodeView) -> bool:
    """The node has an accelerator (allocatable, or capacity: a device plugin takes a failed
    device out of allocatable, and the GPU-health scan must still see that node)."""
    return bool(accelerators_of(node.allocatable) or accelerators_of(node.capacity)) or node.gpu_capacity > 0


# ----------------------------------------------------------------------------- DRA


@dataclass(frozen=True)
class DraDevice:
    """One entry of a ResourceClaim's ``status.allocation.devices.results``."""

    driver: str
    pool: str
    device: str
    request: str = ""

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class ResourceClaimView:
    """What gpuwarden reads of a ``resource.k8s.io/v1`` ResourceClaim: its allocated devices and
    the pods it is reserved for (``status.reservedFor``: their UIDs and names)."""

    namespace: str
    name: str
    devices: tuple[DraDevice, ...] = ()
    reserved_uids: tuple[str, ...] = ()
    reserved_names: tuple[str, ...] = ()

    def serves(self, pod: PodView) -> bool:
        if pod.namespace != self.namespace or self.name not in pod.resource_claims:
            return False
        return pod.uid in self.reserved_uids if pod.uid and self.reserved_uids else pod.name in self.reserved_names


def resource_claim_from_json(obj: Mapping[str, Any]) -> ResourceClaimView:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or ()
    consumers = [c for c in status.get("reservedFor") or () if isinstance(c, Mapping) and c.get("resource") == "pods"]
    return ResourceClaimView(
        namespace=str(meta.get("namespace", "default")),
        name=str(meta.get("name", "")),
        devices=tuple(
            DraDevice(
                str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")), str(r.get("request", ""))
            )
            for r in results
            if isinstance(r, Mapping) and not r.get("adminAccess")  # admin access watches a device, holds none
        ),
        reserved_uids=tuple(str(c["uid"]) for c in consumers if c.get("uid")),
        reserved_names=tuple(str(c.get("name", "")) for c in consumers),
    )


# ----------------------------------------------------------------------------- a pod's


@dataclass(frozen=True)
class PodAccelerators:
    """A pod's accelerators and network devices: its requests of them, and its DRA devices."""

    requests: Mapping[str, int] = field(default_factory=dict)
    devices: tuple[DraDevice, ...] = ()

    @property
    def count(self) -> int:
        return device_count(self.requests) + len(self.devices)

    @property
    def needs_device(self) -> bool:
        """Anything a replacement must carry for it: an accelerator, EFA, another advertised device."""
        return bool(self.requests) or bool(self.devices)


def pod_accelerators(pod: PodView, claims: Sequence[ResourceClaimView] = ()) -> PodAccelerators:
    asked = {
        name: n for name, n in sorted(pod.requests.items()) if n > 0 and (is_accelerator(name) or name in REQUESTABLE)
    }
    if pod.gpu_request and NVIDIA_GPU not in asked:  # a view built without its requests (tests, older callers)
        asked[NVIDIA_GPU] = pod.gpu_request
    devices = tuple(d for claim in claims if claim.serves(pod) for d in claim.devices)
    return PodAccelerators(asked, devices)


# ----------------------------------------------------------------------------- a replacement's


@dataclass(frozen=True)
class Demand:
    """What a replacement for some pods must carry: the requests Karpenter can honour, and which
    of the interrupted node's model labels must be kept for what it cannot request."""

    requests: Mapping[str, int]
    keep_gpu_model: bool = False
    keep_accelerator_model: bool = False
    why: tuple[str, ...] = ()


def _family(driver: str) -> tuple[bool, bool]:
    if driver in GPU_DRIVERS:
        return True, False
    if driver in NEURON_DRIVERS:
        return False, True
    return True, True  # a driver of its own: keep whatever model the node says it has


def replacement_demand(pods: Sequence[PodView], claims: Sequence[ResourceClaimView] = ()) -> Demand:
    """Every requestable accelerator and EFA interface the pods request, summed; and, for MIG
    slices, ``neurondevice`` and DRA devices (no instance type advertises them), which model labels
    of the interrupted node the replacement keeps (docs/cluster.md, "What a replacement requests")."""
    totals: dict[str, int] = {}
    gpu_model = accelerator_model = False
    why: list[str] = []
    for pod in pods:
        found = pod_accelerators(pod, claims)
        for name, n in found.requests.items():
            if name in REQUESTABLE:
                totals[name] = totals.get(name, 0) + n
            elif name.startswith(MIG_PREFIX):
                gpu_model = True
                why.append(f"{pod.key} asks for {n} {name}, which Karpenter cannot request")
            elif name == NEURONDEVICE:
                accelerator_model = True
                why.append(f"{pod.key} asks for {n} {name}, which Karpenter cannot request")
        for device in found.devices:
            gpu, neuron = _family(device.driver)
            gpu_model, accelerator_model = gpu_model or gpu, accelerator_model or neuron
        if found.devices:
            why.append(f"{pod.key} holds {count(len(found.devices), 'DRA device')} ({found.devices[0].driver})")
    return Demand(dict(sorted(totals.items())), gpu_model, accelerator_model, tuple(why))


def model_requirements(node: NodeView, demand: Demand) -> tuple[list[dict[str, Any]], list[str]]:
    """The interrupted node's accelerator count and model as NodeClaim requirements (``In`` its own
    label values), where ``demand`` says to keep them; and why, or why it could not."""
    keys: list[str] = []
    if demand.keep_gpu_model:
        keys += [GPU_COUNT_LABEL, GPU_NAME_LABEL]
    if demand.keep_accelerator_model:
        keys += [ACCELERATOR_COUNT_LABEL, ACCELERATOR_NAME_LABEL]
    carried = [instance_label(node.labels, k) for k in keys]  # Karpenter's key, else EKS Auto Mode's
    kept = [{"key": k, "operator": "In", "values": [v]} for k, v in carried if v]
    if not keys:
        return [], []
    if not kept:
        shown = ", ".join(keys)
        return [], [*demand.why, f"node {node.name} carries none of {shown}: its accelerator model is not kept"]
    shown = ", ".join(f"{r['key']}={r['values'][0]}" for r in kept)
    return kept, [*demand.why, f"keeps the node's {shown}"]
