"""`gpuwarden doctor`'s ``karpenter-version``: the Karpenter the cluster runs, read from its Deployment
(Helm's ``app.kubernetes.io/version`` label, else the controller image's tag), against the versions
gpuwarden supports and what each version lacks of what gpuwarden reads (docs/cluster.md, "Karpenter
versions"). Pure: the Deployments in, one Finding out.

What differs, read in kubernetes-sigs/karpenter at each tag (``pkg/apis/v1``, ``pkg/operator/options``):
- v1.0.0 is the first release of the ``karpenter.sh/v1`` API gpuwarden reads (NodePool, NodeClaim;
  ``spec.expireAfter`` and ``spec.terminationGracePeriod`` on the NodeClaim; budgets' ``reasons``
  Underutilized / Empty / Drifted, the same enum through v1.14); older releases serve ``v1beta1`` only.
- v1.1.0 adds the ``NodeRepair`` feature gate (options.go ``FeatureGates.NodeRepair``).
- v1.2.0 adds the NodeClaim condition ``DisruptionReason`` (nodeclaim_status.go); before it,
  gpuwarden knows Karpenter is disrupting a node by the node's ``karpenter.sh/disrupted`` taint alone
  (services/engine/karpenter.py ``karpenter_deleting`` reads both).
- v1.8.0 adds static NodePools (nodepool.go ``Replicas``).

Run, not only read: the real plane's e2e scenes for a Spot warning, a NodePool budget and expiry pass
unchanged on Karpenter v1.0.8 as on v1.14.1 (docs/realplane.md, "Karpenter versions").
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpuwarden.services.doctor.facts import Finding, Severity, names

CHECK = "karpenter-version"
Version = tuple[int, int, int]
#: the oldest Karpenter whose API gpuwarden reads, and the releases the real plane's scenes run on
#: (realplane/build/pins.toml [karpenter] and [karpenter-oldest]; a test keeps them equal)
OLDEST: Version = (1, 0, 0)
TESTED: Version = (1, 14, 1)
TESTED_OLDEST: Version = (1, 0, 8)
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)")
_IMAGE = re.compile(r"/karpenter/controller:v?(\d+\.\d+\.\d+)")


@dataclass(frozen=True)
class Difference:
    since: Version
    what: str
    before: str  # what gpuwarden does on an older Karpenter


DIFFERENCES = (
    Difference(
        (1, 1, 0),
        "the NodeRepair feature gate",
        "no Karpenter node repair: a failing GPU node is handled by gpuwarden's gpu-unhealthy alone",
    ),
    Difference(
        (1, 2, 0),
        "the NodeClaim condition DisruptionReason",
        "Karpenter's disruption of a node is seen by its karpenter.sh/disrupted taint alone",
    ),
    Difference((1, 8, 0), "static NodePools (spec.replicas)", "no static NodePool to find"),
)


def parse(text: str) -> Version | None:
    match = _VERSION.match(text.strip())
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def deployment_version(deployment: Mapping[str, Any]) -> str | None:
    """The Karpenter release a Deployment runs: Helm's version label, else the controller image's tag."""
    meta = deployment.get("metadata") or {}
    label = (meta.get("labels") or {}).get("app.kubernetes.io/version")
    if label and parse(str(label)):
        return str(label)
    spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in spec.get("containers") or []:
        found = _IMAGE.search(str(container.get("image", "")))
        if found:
            return found[1]
    return None


def _shown(version: Version) -> str:
    return "v" + ".".join(map(str, version))


def check_karpenter_version(deployments: Sequence[Mapping[str, Any]]) -> Finding:
    """One finding for every Karpenter Deployment found (``deployments``: Karpenter's only)."""
    if not deployments:
        return Finding(
            CHECK, Severity.OK, "no Karpenter Deployment (EKS Auto Mode runs Karpenter for AWS): no version to check"
        )
    errors: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    for deployment in deployments:
        meta = deployment.get("metadata") or {}
        where = f"{meta.get('namespace')}/{meta.get('name')}"
        text = deployment_version(deployment)
        version = parse(text) if text else None
        if version is None:
            warnings.append(f"{where}: version not found (no app.kubernetes.io/version label, no controller image tag)")
        elif version < OLDEST:
            errors.append(f"{where} {text}: serves karpenter.sh/v1beta1 only")
        elif version[:2] > TESTED[:2]:
            warnings.append(f"{where} {text}: newer than the newest tested ({_shown(TESTED)})")
        else:
            lacks = [f"before {_shown(d.since)}, {d.what}: {d.before}" for d in DIFFERENCES if version < d.since]
            notes.append(f"{where} {text}" + (f" ({'; '.join(lacks)})" if lacks else ""))
    supported = (
        f"gpuwarden supports Karpenter {_shown(OLDEST)} to {_shown(TESTED)[:-2]}.x"
        f" (tested on {_shown(TESTED_OLDEST)} and {_shown(TESTED)})"
    )
    if errors:
        return Finding(
            CHECK,
            Severity.ERROR,
            f"{names(errors)}: gpuwarden reads the karpenter.sh/v1 API; {supported}",
            "upgrade Karpenter to v1.0 or later (its v1 migration guide)",
        )
    if warnings:
        return Finding(
            CHECK,
            Severity.WARN,
            f"{names(warnings)}; {supported}" + (f"; {names(notes)}" if notes else ""),
            "test gpuwarden against this version before relying on it (docs/cluster.md, 'Karpenter versions')",
        )
    return Finding(CHECK, Severity.OK, f"{names(notes)}: {supported}")
