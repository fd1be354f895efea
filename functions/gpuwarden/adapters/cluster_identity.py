"""The right cluster or none (docs/cli.md#the-right-cluster): the kubeconfig's cluster checked against
the policy's before anything is read from or written to it.

On EKS (the server is an `*.eks.amazonaws.com` endpoint) the policy's cluster is looked up with
`DescribeCluster` in the endpoint's region and its endpoint must be the kubeconfig's server: names in
kubeconfigs vary (`aws eks update-kubeconfig` writes the cluster's ARN, eksctl `NAME.REGION.eksctl.io`),
the endpoint does not. Elsewhere the current context's cluster name must be the policy's.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from gpuwarden.adapters.errors import aws_call
from gpuwarden.domain.errors import CloudNotFound, InvalidSetting

_EKS_HOST = re.compile(r"\.(?P<region>[a-z]{2}(-[a-z]+)+-\d)\.eks\.amazonaws\.com$")


@dataclass(frozen=True)
class KubeconfigCluster:
    context: str
    name: str
    server: str


def _documents(paths: str) -> list[dict[str, Any]]:
    import yaml

    found = [os.path.expanduser(p) for p in paths.split(os.pathsep) if p]
    documents = []
    for path in (p for p in found if os.path.exists(p)):
        with open(path, encoding="utf-8") as handle:
            try:
                document = yaml.safe_load(handle)
            except yaml.YAMLError:  # the client refuses the file with its own reason, naming it
                continue
        if isinstance(document, dict):
            documents.append(document)
    return documents


def _named(documents: list[dict[str, Any]], section: str, name: str) -> dict[str, Any] | None:
    """The first entry of that name, as kubectl merges several files (the first file wins)."""
    for document in documents:
        for entry in document.get(section) or ():
            if isinstance(entry, dict) and entry.get("name") == name:
                return entry
    return None


def current_cluster(paths: str) -> KubeconfigCluster | None:
    """The current context's cluster, as kubectl picks it (the first file's `current-context`), or
    None when the files do not say (the client then refuses them, with its own reason)."""
    documents = _documents(paths)
    context = next((str(d["current-context"]) for d in documents if d.get("current-context")), None)
    entry = _named(documents, "contexts", context) if context else None
    cluster_name = str(((entry or {}).get("context") or {}).get("cluster") or "")
    cluster = _named(documents, "clusters", cluster_name) if cluster_name else None
    if context is None or cluster is None:
        return None
    return KubeconfigCluster(context, cluster_name, str((cluster.get("cluster") or {}).get("server") or ""))


def _same_endpoint(a: str, b: str) -> bool:
    one, two = urlsplit(a.lower()), urlsplit(b.lower())
    return (one.hostname, one.port or 443) == (two.hostname, two.port or 443)


def check_cluster(kubeconfig: str, cluster: str) -> None:
    """Raise InvalidSetting (exit 2) naming both when the kubeconfig's current cluster is not
    ``cluster`` (the policy's)."""
    found = current_cluster(kubeconfig)
    if found is None:
        return
    host = urlsplit(found.server).hostname or ""
    eks = _EKS_HOST.search(host)
    if eks is None:
        if found.name != cluster:
            raise InvalidSetting(
                "KUBECONFIG",
                f"context {found.context!r} is cluster {found.name!r} ({found.server}), but the policy is for "
                f"cluster {cluster!r}: switch the context (kubectl config use-context) or use that cluster's policy",
            )
        return
    from gpuwarden.adapters import sdk

    region = eks.group("region")
    try:
        with aws_call(f"EKS DescribeCluster {cluster} ({region})"):
            endpoint = str(sdk.client("eks", region).describe_cluster(name=cluster)["cluster"]["endpoint"])
    except CloudNotFound:
        raise InvalidSetting(
            "KUBECONFIG",
            f"context {found.context!r} is EKS endpoint {found.server}, but the policy's cluster {cluster!r} "
            f"does not exist in {region}",
        ) from None
    if not _same_endpoint(endpoint, found.server):
        raise InvalidSetting(
            "KUBECONFIG",
            f"context {found.context!r} is EKS endpoint {found.server} ({found.name}), but the policy's cluster "
            f"{cluster!r} is {endpoint}: switch the context (aws eks update-kubeconfig --name {cluster}) or use "
            "that cluster's policy",
        )
