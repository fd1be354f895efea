"""Discovery as kube-apiserver answers it: ``/version``, ``/api``, ``/apis`` and each group version."""

from __future__ import annotations

from typing import Any

from sim.apiserver import errors
from sim.apiserver.openapi import openapi_v3
from sim.apiserver.registry import Registry

VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.4-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2025-04-22T00:00:00Z",
    "goVersion": "go1.23.6",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def no_such_path() -> errors.ApiError:
    return errors.ApiError(404, "the server could not find the requested resource", "NotFound", {})


def _openapi(reg: Registry, segments: list[str]) -> dict[str, Any]:
    found = openapi_v3(reg, segments)
    if found is None:
        raise no_such_path()
    return found


def discovery_doc(reg: Registry, segments: list[str], port: int) -> dict[str, Any] | None:
    """/version, /api, /api/v1, /apis, /apis/<g>, /apis/<g>/<v>; None for other paths.

    /openapi/v3: what `kubectl apply` reads before it sends (sim/apiserver/openapi.py); the rest of
    /openapi/* answers 404: kubectl's get, cordon, drain, annotate, taint and exec do not need it.
    """
    if segments == ["version"]:
        return VERSION
    if segments == ["api"]:
        return {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}],
        }
    if segments == ["apis"]:
        return reg.group_list()
    if segments == ["api", "v1"]:
        return reg.resource_list("", "v1")
    if segments and segments[0] in ("openapi", "swagger.json"):
        return _openapi(reg, segments)
    if len(segments) not in (2, 3) or segments[0] != "apis":
        return None
    if len(segments) == 2:
        versions = [v for g, v in reg.groups() if g == segments[1]]
        if not versions:
            raise no_such_path()
        return reg.group_doc(segments[1], versions[0])
    doc = reg.resource_list(segments[1], segments[2])
    if doc is None:
        raise no_such_path()
    return doc
