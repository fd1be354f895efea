"""Authorization: ``selfsubjectaccessreviews`` (authorization.k8s.io/v1) and the matching 403s.

By default everything is allowed (the simulator checks no token). A test restricts the user:

    sim.authorizer.deny("patch", "nodes")                     # one verb on one resource
    sim.authorizer.deny("create", "pods", subresource="eviction")
    sim.authorizer.restrict_to(cluster_role["rules"])          # only what an RBAC role grants

A ``SelfSubjectAccessReview`` is answered as the API server answers it (``status.allowed``,
``status.reason``, 201, nothing stored), and a request the authorizer refuses gets the same
``403 Forbidden`` message a real server sends, so the review and the request always agree.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from sim.apiserver import errors

Obj = dict[str, Any]
USER = "kubesim-user"


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    @property
    def full_resource(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource


def _rule_allows(rule: Obj, attrs: Attributes) -> bool:
    groups, resources, verbs = rule.get("apiGroups") or [], rule.get("resources") or [], rule.get("verbs") or []
    names = rule.get("resourceNames") or []
    return (
        ("*" in groups or attrs.group in groups)
        and ("*" in resources or attrs.full_resource in resources)
        and ("*" in verbs or attrs.verb in verbs)
        and (not names or attrs.name in names)
    )


@dataclass
class Authorizer:
    denials: list[Attributes] = field(default_factory=list)
    #: RBAC PolicyRules the user is limited to (None: everything)
    rules: list[Obj] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def deny(self, verb: str, resource: str, group: str = "", subresource: str = "") -> None:
        with self._lock:
            self.denials.append(Attributes(verb, group, resource, subresource))

    def restrict_to(self, rules: list[Obj] | None) -> None:
        with self._lock:
            self.rules = None if rules is None else list(rules)

    def allow_all(self) -> None:
        with self._lock:
            self.denials.clear()
            self.rules = None

    def decide(self, attrs: Attributes) -> tuple[bool, str]:
        if attrs.group == "authorization.k8s.io" and attrs.resource.startswith("self"):
            return True, "self reviews are always allowed (system:basic-user)"
        with self._lock:
            denied = any(
                d.verb == attrs.verb
                and d.group == attrs.group
                and d.resource == attrs.resource
                and d.subresource == attrs.subresource
                for d in self.denials
            )
            rules = self.rules
        if denied:
            return False, ""
        if rules is not None and not any(_rule_allows(r, attrs) for r in rules):
            return False, ""
        return True, 'RBAC: allowed by ClusterRoleBinding "kubesim-admin" of ClusterRole "cluster-admin"'

    def check(self, attrs: Attributes) -> None:
        """Raise the API server's 403 when ``attrs`` is not allowed."""
        allowed, _ = self.decide(attrs)
        if allowed:
            return
        where = f' in the namespace "{attrs.namespace}"' if attrs.namespace else " at the cluster scope"
        named = f'{attrs.full_resource} "{attrs.name}"' if attrs.name else attrs.full_resource
        raise errors.ApiError(
            403,
            f'{named} is forbidden: User "{USER}" cannot {attrs.verb} resource "{attrs.full_resource}" '
            f'in API group "{attrs.group}"{where}',
            "Forbidden",
            {"name": attrs.name, "kind": attrs.resource} if attrs.name else {"kind": attrs.resource},
        )

    def review(self, body: Any) -> Obj:
        """Answer a SelfSubjectAccessReview (422 when it asks for neither or both attribute kinds)."""
        spec = (body or {}).get("spec") or {} if isinstance(body, dict) else {}
        res, non_res = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if bool(res) == bool(non_res):
            raise errors.invalid(
                "SelfSubjectAccessReview",
                "",
                "authorization.k8s.io",
                [
                    (
                        "spec.resourceAttributes",
                        "Invalid value: exactly one of nonResourceAttributes or resourceAttributes",
                    )
                ],
            )
        if res:
            attrs = Attributes(
                str(res.get("verb", "")),
                str(res.get("group", "")),
                str(res.get("resource", "")),
                str(res.get("subresource", "")),
                str(res.get("namespace", "")),
                str(res.get("name", "")),
            )
            allowed, reason = self.decide(attrs)
        else:
            allowed, reason = True, "non-resource URLs are allowed"
        status: Obj = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return {
            "kind": "SelfSubjectAccessReview",
            "apiVersion": "authorization.k8s.io/v1",
            "metadata": {"creationTimestamp": None},
            "spec": spec,
            "status": status,
        }


def request_attributes(
    method: str, rtype_group: str, plural: str, sub: str | None, ns: str | None, name: str | None, watch: bool
) -> Attributes:
    """The verb a request is authorized as (the API server's RequestInfo)."""
    if sub == "exec":
        verb = "create" if method == "POST" else "get"
    elif method in ("GET", "HEAD"):
        verb = "get" if name else ("watch" if watch else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
        if method == "DELETE":
            verb = "delete" if name else "deletecollection"
    return Attributes(verb, rtype_group, plural, sub or "", ns or "", name or "")
