"""The control plane's programs as the plane runs them: etcd, kube-apiserver, kube-controller-manager
and kube-scheduler (their flags), and the kubeconfigs its clients read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from realplane.plane.certs import Pki

SERVICE_CIDR = "10.0.0.0/24"

#: The cluster the plane's kubeconfigs name: the policy's of the scenes and the sandbox (gpuwarden
#: checks one against the other: docs/cli.md#the-right-cluster)
CLUSTER_NAME = "ml-prod"

# Everything the API server receives, at Metadata level: the artifacts show what each client did.
AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}


def kubeconfig(server: str, ca: Path, user: str, cert: Path, key: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "realplane", "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": "realplane",
    }


def etcd_argv(workdir: Path, port: int, peer: int) -> list[str]:
    return [
        "etcd",
        "--name=realplane",
        f"--data-dir={workdir / 'etcd'}",
        f"--listen-client-urls=http://127.0.0.1:{port}",
        f"--advertise-client-urls=http://127.0.0.1:{port}",
        f"--listen-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
        f"--initial-cluster=realplane=http://127.0.0.1:{peer}",
        "--unsafe-no-fsync",  # a throw-away store: no fsync cost on a shared 2-core machine
        "--log-level=warn",
    ]


def apiserver_argv(workdir: Path, artifacts: Path, pki: Pki, ports: dict[str, int], audit_policy: Path) -> list[str]:
    return [
        "kube-apiserver",
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        f"--cert-dir={workdir / 'apiserver'}",
        f"--tls-cert-file={pki.apiserver_cert}",
        f"--tls-private-key-file={pki.apiserver_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_pub}",
        f"--service-account-signing-key-file={pki.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        "--enable-priority-and-fairness=true",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        # pods/exec goes to KWOK's server, which presents a certificate of the plane's CA
        f"--kubelet-certificate-authority={pki.ca_cert}",
        f"--kubelet-client-certificate={pki.admin_cert}",
        f"--kubelet-client-key={pki.admin_key}",
        "--kubelet-preferred-address-types=InternalIP",
        f"--audit-policy-file={audit_policy}",
        f"--audit-log-path={artifacts / 'audit.log'}",
        "--audit-log-maxsize=200",
    ]


def program_argv(name: str, kubeconfig: Path, port: int, workdir: Path, flags: list[str]) -> list[str]:
    """kube-controller-manager or kube-scheduler, as its own user (``system:<name>``, whose
    ``kubeconfig`` this is), authorized by the API server's bootstrap RBAC as in a real cluster."""
    return [
        name,
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1",
        "--leader-elect=false",
        f"--secure-port={port}",
        f"--cert-dir={workdir / name}",
        *flags,
    ]


def controller_manager_flags(pki: Pki) -> list[str]:
    return [
        "--controllers=*",  # every default one: disruption, garbagecollector, job, namespace, ...
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.sa_key}",
        f"--root-ca-file={pki.ca_cert}",
    ]
