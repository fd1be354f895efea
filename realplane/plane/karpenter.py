"""Karpenter on the plane: its KWOK provider's node class, the tour's NodePool, the CRDs the build
copied (each waited for until Established), and what Karpenter must say Ready before a scene runs."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from realplane.build import pins

NODE_CLASS_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
INSTANCE_TYPES = Path(__file__).resolve().parent / "instance_types.json"

#: `Plane.wait_for`: poll a check until it answers, naming what is waited for.
WaitFor = Callable[..., object]


def tour_nodepool(**overrides: Any) -> dict[str, Any]:
    """The tour's GPU NodePool (sim/builders/nodes.py's ``nodepool``), on the plane's KWOKNodeClass."""
    from sim.builders.nodes import nodepool

    pool = nodepool(**overrides)
    pool["spec"]["template"]["spec"]["nodeClassRef"] = dict(NODE_CLASS_REF)
    return pool


def install_crds(api: Any, folder: str, wait_for: WaitFor, timeout: float, pin_set: pins.PinSet | None = None) -> None:
    """The CRDs the build copied into ``share/<folder>`` (of ``pin_set``'s build), each waited for until Established."""
    from kubernetes import client

    ext: Any = client.ApiextensionsV1Api(api)
    names = []
    for path in sorted((pins.share_dir(pin_set) / folder).glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        ext.create_custom_resource_definition(crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        wait_for(f"CRD {name} Established", partial(_established, ext, name), timeout=timeout)


def install_objects(
    api: Any, nodepools: list[dict[str, Any]], wait_for: WaitFor, timeout: float, pin_set: pins.PinSet | None = None
) -> None:
    """Karpenter's CRDs (Established; those of the Karpenter ``pin_set`` builds), the KWOKNodeClass
    ``default`` and the NodePools."""
    from kubernetes import client

    install_crds(api, "karpenter-crds", wait_for, timeout, pin_set)
    custom: Any = client.CustomObjectsApi(api)
    custom.create_cluster_custom_object(
        "karpenter.kwok.sh",
        "v1alpha1",
        "kwoknodeclasses",
        {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}},
    )
    for pool in nodepools:
        custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool)


def environment(
    kubeconfig: Path, health_port: int, metrics_port: int, pin_set: pins.PinSet | None = None
) -> dict[str, str]:
    """How Karpenter's KWOK provider is run on the plane; ``pin_set``: the set of pins it is built in."""
    env = {
        "KUBECONFIG": str(kubeconfig),
        "DISABLE_LEADER_ELECTION": "true",
        "HEALTH_PROBE_PORT": str(health_port),
        "METRICS_PORT": str(metrics_port),
        "LOG_LEVEL": "debug",
    }
    if pin_set is pins.KARPENTER_OLDEST:
        # v1.0 serves the CRDs' v1beta1 <-> v1 conversion webhook unless told not to (operator
        # options `DisableWebhook`); the plane's CRDs name no webhook and it would need a serving
        # certificate. Its instance types are built in (pins.OLDEST_MODULE's overlay).
        env["DISABLE_WEBHOOK"] = "true"
        # and it panics at start without the namespace it runs in (knative's system.Namespace(), read
        # by operator.NewOperator), which its Helm chart sets from the downward API
        env["SYSTEM_NAMESPACE"] = "kube-system"
    else:
        env["INSTANCE_TYPES_FILE_PATH"] = str(INSTANCE_TYPES)
    return env


def wait_ready(api: Any, nodepools: list[dict[str, Any]], wait_for: WaitFor, timeout: float) -> None:
    """The node class is Ready once Karpenter's status controller has seen it: before that
    Karpenter launches nothing for the NodePools that use it. Then each NodePool Ready."""
    from kubernetes import client

    custom: Any = client.CustomObjectsApi(api)
    wait_for(
        "KWOKNodeClass default Ready",
        partial(_custom_condition, custom, ("karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses", "default"), "Ready"),
        timeout=timeout,
    )
    for pool in nodepools:
        name = pool["metadata"]["name"]
        wait_for(
            f"NodePool {name} Ready",
            partial(_custom_condition, custom, ("karpenter.sh", "v1", "nodepools", name), "Ready"),
            timeout=timeout,
        )


def _established(ext: Any, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def _custom_condition(custom: Any, ref: tuple[str, str, str, str], kind: str) -> bool:
    return _condition(custom.get_cluster_custom_object(*ref), kind)


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in obj.get("status", {}).get("conditions", []))
