"""The OpenAPI v3 that `kubectl apply` asks for before it sends an object, and only that.

kubectl's default `--validate=strict` validates on the server when the server says it can: it reads
``/openapi/v3`` (the index of group versions), then the group version's document, and looks there
for the resource's PATCH operation (``x-kubernetes-group-version-kind``) taking the
``fieldValidation`` query parameter (k8s.io/kubectl ``pkg/util/openapi`` / cli-runtime
``resource.QueryParamVerifierV3``, ``supportsQueryParamV3``). With neither v3 nor v2 served it
refuses to send ("failed to download openapi") unless told ``--validate=false``.

So each group version's document holds, per resource, that one operation, and no schemas. What it
does not give: field validation itself (the simulator accepts ``fieldValidation`` and stores what it
is sent, unknown fields included), ``kubectl explain``, or server-side apply.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sim.apiserver.registry import Registry

FIELD_VALIDATION = {
    "name": "fieldValidation",
    "in": "query",
    "description": "accepted; the simulator does not validate fields (sim/apiserver/openapi.py)",
    "schema": {"type": "string", "uniqueItems": True},
}


def _prefix(group: str, version: str) -> str:
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _group_versions(reg: Registry) -> list[tuple[str, str]]:
    return [("", "v1"), *reg.groups()]


def gv_document(reg: Registry, group: str, version: str) -> dict[str, Any] | None:
    """One group version's document: a PATCH operation per resource, with ``fieldValidation``."""
    listed = reg.resource_list(group, version)
    if listed is None:
        return None
    paths: dict[str, Any] = {}
    for resource in listed["resources"]:
        if "/" in resource["name"]:
            continue
        scope = "/namespaces/{namespace}" if resource["namespaced"] else ""
        path = f"/{_prefix(group, version)}{scope}/{resource['name']}/{{name}}"
        gvk = {"group": group, "version": version, "kind": resource["kind"]}
        paths[path] = {
            "patch": {
                "operationId": f"patch{resource['kind']}",
                "x-kubernetes-action": "patch",
                "x-kubernetes-group-version-kind": gvk,
                "parameters": [FIELD_VALIDATION],
                "responses": {"200": {"description": "OK"}},
            }
        }
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes (simulated)", "version": "unversioned"}, "paths": paths}


def index(reg: Registry) -> dict[str, Any]:
    """``/openapi/v3``: each group version and the URL of its document (with a hash, as kube-apiserver)."""
    paths = {}
    for group, version in _group_versions(reg):
        doc = gv_document(reg, group, version)
        digest = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()
        prefix = _prefix(group, version)
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash={digest}"}
    return {"paths": paths}


def openapi_v3(reg: Registry, segments: list[str]) -> dict[str, Any] | None:
    """``/openapi/v3`` and ``/openapi/v3/<api/v1 | apis/<group>/<version>>``; None for anything else."""
    if segments == ["openapi", "v3"]:
        return index(reg)
    rest = segments[2:]
    if segments[:2] != ["openapi", "v3"]:
        return None
    if rest[:1] == ["api"] and len(rest) == 2:
        return gv_document(reg, "", rest[1])
    if rest[:1] == ["apis"] and len(rest) == 3:
        return gv_document(reg, rest[1], rest[2])
    return None
