"""A real Kubernetes control plane with real Karpenter, on loopback, for tests (docs/realplane.md).

    with Plane(artifacts=Path("test-artifacts/realplane")) as plane:
        api = plane.api_client()            # the official kubernetes client, admin
        plane.kubeconfig                    # for a subprocess (`gpuwarden invoke`, kubectl)
        plane.wait_for("node Ready", lambda: ...)

``Plane.start`` starts, each waiting for the previous to be ready (no fixed sleeps): etcd; the API
server (default admission plugins, API Priority and Fairness on, RBAC, an audit log); the
controller-manager (every default controller, service-account credentials); the scheduler; KWOK
(the "kubelet" of every node annotated ``kwok.x-k8s.io/node=fake``: node heartbeat by lease, pods
ready/completed/deleted, and ``pods/exec`` run as a local command); then Karpenter's CRDs, a
``KWOKNodeClass`` named ``default``, the NodePools given, and Karpenter's KWOK provider.
Everything runs from the binaries ``make setup-real`` built, in a temporary directory, on free
ports; each component's log is kept in ``artifacts``. ``stop`` (also on exit, on SIGTERM, on
Ctrl-C, and if the test process dies: each child has a parent-death signal) ends them all.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from realplane.build import pins
from realplane.plane.certs import client_cert, make_pki

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

T = TypeVar("T")

#: The annotation Karpenter's KWOK provider puts on every node it creates; KWOK manages those.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR = f"{KWOK_NODE_ANNOTATION}=fake"
#: The KWOK node class every NodePool of the plane points at (the real plane's EC2NodeClass).
NODE_CLASS_REF = {"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"}
INSTANCE_TYPES = Path(__file__).resolve().parent / "instance_types.json"
SERVICE_CIDR = "10.0.0.0/24"
READY_TIMEOUT = 90.0
_PR_SET_PDEATHSIG = 1


class PlaneError(RuntimeError):
    """One line: which component, what went wrong, where its log is, how to fix it if we know."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Component:
    """One program of the plane: how it is run, where it logs, and its process."""

    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            out.write(f"$ {' '.join(self.argv)}\n".encode())
            out.flush()
            self.proc = subprocess.Popen(  # noqa: S603 - our own binaries, our own arguments
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,  # its own process group: stop() ends it and its children
                preexec_fn=_die_with_parent,  # runs between fork and exec: no threads there
            )

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def last_line(self) -> str:
        try:
            lines = [ln for ln in self.log.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""

    def pause(self) -> None:
        """SIGSTOP the program (and its children): it holds its sockets and answers nothing."""
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGCONT)

    def stop(self, grace: float = 10.0) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            try:
                proc.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue


#: The cluster the plane's kubeconfigs name: the policy's of the scenes and the sandbox (gpuwarden
#: checks one against the other: docs/cli.md#the-right-cluster)
CLUSTER_NAME = "ml-prod"


def _kubeconfig(server: str, ca: Path, user: str, cert: Path, key: Path) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CLUSTER_NAME, "cluster": {"server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}],
        "contexts": [{"name": "realplane", "context": {"cluster": CLUSTER_NAME, "user": user}}],
        "current-context": "realplane",
    }


# Everything the API server receives, at Metadata level: the artifacts show what each client did.
_AUDIT_POLICY = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "rules": [{"level": "Metadata"}]}

# `kill` for pods/exec: KWOK runs an exec'd command on this machine, so the `kill -s USR1 1` of a
# `signal:` checkpoint would signal this machine's PID 1. This one, first on KWOK's PATH, records
# the signal (one line per call in $REALPLANE_SIGNALS) and signals nothing.
_KILL_SHIM = """#!/bin/sh
printf '%s %s\\n' "$(date -u +%Y-%m-%dT%H:%M:%S.%NZ)" "$*" >> "${REALPLANE_SIGNALS:?}"
"""


def tour_nodepool(**overrides: Any) -> dict[str, Any]:
    """The tour's GPU NodePool (sim/builders/nodes.py's ``nodepool``), on the plane's KWOKNodeClass."""
    from sim.builders.nodes import nodepool

    pool = nodepool(**overrides)
    pool["spec"]["template"]["spec"]["nodeClassRef"] = dict(NODE_CLASS_REF)
    return pool


class Plane:
    """The real control plane. ``with Plane(...) as plane:`` starts it and always stops it."""

    def __init__(
        self,
        artifacts: Path,
        *,
        nodepools: Iterable[Mapping[str, Any]] | None = None,
        karpenter: bool = True,
        complete_jobs: bool = False,
        jobset: bool = False,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.artifacts = artifacts
        self._audit_from = 0  # `mark_audit`: where `audit` starts reading, and from when
        self._audit_since = ""
        self.nodepools = [dict(p) for p in nodepools] if nodepools is not None else [tour_nodepool()]
        self.with_karpenter = karpenter
        #: KWOK's pod-complete stage: a Job's pod Succeeds as soon as it runs. Off by default, so
        #: a training pod runs until it is evicted or deleted, as a long training run does.
        self.complete_jobs = complete_jobs
        #: JobSet's CRD (jobset.x-k8s.io), so a user's JobSet manifest is admitted (no JobSet controller).
        self.jobset = jobset
        self.ready_timeout = ready_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="realplane-"))
        self.components: dict[str, Component] = {}
        self.ports = {
            name: free_port()
            for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok", "karpenter")
        }
        self.ports["karpenter-metrics"] = free_port()
        self.pki = make_pki(self.workdir / "pki")
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        #: Every kubeconfig written, by path: (user, certificate, key); rewritten if the port moves.
        self._kubeconfigs: dict[Path, tuple[str, Path, Path]] = {
            self.kubeconfig: ("admin", self.pki.admin_cert, self.pki.admin_key)
        }
        self._write_kubeconfigs()
        #: Every `kill` a `signal:` checkpoint ran through pods/exec (see _KILL_SHIM).
        self.signals = self.artifacts / "signals.log"
        self.exec_dir = self.workdir / "exec"
        self._stopped = False
        self._client: ApiClient | None = None
        #: How each component's readiness is probed (its URL, with the admin certificate, verified).
        self._probes: dict[str, tuple[str, bool, bool]] = {}

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Plane:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> Plane:
        missing = pins.missing_binaries()
        if missing or not pins.share_complete():
            what = ", ".join(missing) if missing else "KWOK's stages and Karpenter's CRDs"
            raise PlaneError(f"real plane: {what} not built in {pins.key_dir()} (run `{pins.HOW_TO_BUILD}`)")
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for old in self.artifacts.glob("*.log"):  # a previous run's logs: this run's start empty
            old.unlink()
        self.signals.touch()
        atexit.register(self.stop)
        _stop_on_sigterm()
        self._start(self._start_etcd, "etcd", ("etcd", "etcd-peer"))
        self._start(self._start_apiserver, "kube-apiserver", ("apiserver",))
        self._start(self._start_controller_manager, "kube-controller-manager", ("controller-manager",))
        self._start(self._start_scheduler, "kube-scheduler", ("scheduler",))
        self._prepare_kwok()
        self._start(self._start_kwok, "kwok", ("kwok",))
        if self.jobset:
            self.install_crds("jobset-crds")
        if self.with_karpenter:
            self._install_karpenter_objects()
            self._start(self._start_karpenter, "karpenter", ("karpenter", "karpenter-metrics"))
        return self

    def _start(self, starter: Callable[[], None], name: str, ports: tuple[str, ...], tries: int = 3) -> None:
        """Start one component; if it could not bind a port it was given (free when picked, taken
        by another process since), pick new ones and start it again."""
        for attempt in range(1, tries + 1):
            log = self.artifacts / f"{name}.log"
            mark = log.stat().st_size if log.exists() else 0
            try:
                starter()
                return
            except PlaneError:
                component = self.components.get(name)
                if attempt == tries or component is None or component.running or not _bind_failed(log, mark):
                    raise
            for port in ports:
                self.ports[port] = free_port()
            if "apiserver" in ports:
                self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
                self._write_kubeconfigs()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for component in reversed(list(self.components.values())):
            component.stop()
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()  # type: ignore[no-untyped-call]
        with contextlib.suppress(ValueError):
            atexit.unregister(self.stop)
        shutil.rmtree(self.workdir, ignore_errors=True)

    # ------------------------------------------------------------------ clients and waiting

    def api_client(self) -> ApiClient:
        """An admin client of the official kubernetes package (one, shared, closed by ``stop``)."""
        if self._client is None:
            from kubernetes import client, config

            configuration = client.Configuration()
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(self.kubeconfig), client_configuration=configuration
            )
            self._client = client.ApiClient(configuration)
        return self._client

    def kubeconfig_for(self, user: str, groups: tuple[str, ...] = ("system:masters",)) -> Path:
        """A kubeconfig for a client of its own name, so the audit log tells its requests apart
        (``user.username`` is ``user``). By default a cluster admin, as the admin kubeconfig."""
        path = self.workdir / f"{user}.kubeconfig"
        if path not in self._kubeconfigs:
            cert, key = client_cert(self.pki, user, groups, self.workdir / "pki")
            self._kubeconfigs[path] = (user, cert, key)
            self._write_kubeconfigs()
        return path

    def _write_kubeconfigs(self) -> None:
        for path, (user, cert, key) in self._kubeconfigs.items():
            path.write_text(yaml.safe_dump(_kubeconfig(self.server, self.pki.ca_cert, user, cert, key)))

    def mark_audit(self) -> None:
        """From now on `audit` answers only what follows: a scene on a plane shared by several
        reads its own requests (names repeat across scenes: a Deployment's pods, a Job's)."""
        path = self.artifacts / "audit.log"
        self._audit_from = path.stat().st_size if path.exists() else 0
        # a long request (an exec stream) is logged when it completes: one received before the
        # mark may be written after it
        self._audit_since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def audit(self) -> list[dict[str, Any]]:
        """Every request the API server has answered since `mark_audit` (audit events at
        ResponseComplete), oldest first: ``user.username``, ``verb``, ``objectRef``,
        ``responseStatus.code``, ..."""
        events = []
        with (self.artifacts / "audit.log").open("rb") as raw:
            size = raw.seek(0, 2)
            raw.seek(self._audit_from if self._audit_from <= size else 0)
            for line in raw.read().decode("utf-8").splitlines():
                event = json.loads(line)
                received = str(event.get("requestReceivedTimestamp", ""))
                if event.get("stage") == "ResponseComplete" and received >= self._audit_since:
                    events.append(event)
        return events

    def wait_for(self, what: str, check: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.1) -> T:
        """Poll ``check`` until it returns something truthy; fail in one line naming ``what``.

        A component of the plane that exits meanwhile fails it at once, naming the component."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            for component in self.components.values():
                if not component.running:
                    code = component.proc.returncode if component.proc else None
                    raise PlaneError(
                        f"real plane: {component.name} exited (code {code}) while waiting for {what}; "
                        f"log {component.log}: {component.last_line()}"
                    )
            try:
                result = check()
            except Exception as err:  # not ready yet, whatever the error: kept for the message
                result, last_error = None, f"{type(err).__name__}: {err}"[:300]
            if result:
                return result
            if time.monotonic() >= deadline:
                raise PlaneError(
                    f"real plane: {what} not reached in {timeout:.0f} s"
                    + (f" (last: {last_error})" if last_error else "")
                )
            time.sleep(interval)

    def restart(self, name: str) -> None:
        """Stop component ``name`` (SIGTERM, as a rolling update does) and start it again with the
        same flags, ports and store; return once it is ready again (docs/realplane.md, "Faults")."""
        component = self.components[name]
        component.stop()
        component.start()
        url, client_cert, verify = self._probes[name]
        self._ready(component, url, client_cert=client_cert, verify=verify)

    def _ready(self, component: Component, url: str, *, client_cert: bool = False, verify: bool = False) -> None:
        self._probes[component.name] = (url, client_cert, verify)
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert)) if verify else _insecure()
        if client_cert:
            context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))

        def probe() -> bool:
            try:
                with urllib.request.urlopen(url, timeout=2, context=context if url.startswith("https") else None) as r:  # noqa: S310
                    return bool(r.status == 200)
            except urllib.error.URLError:
                return False

        try:
            self.wait_for(f"{component.name} ready ({url})", probe, timeout=self.ready_timeout)
        except PlaneError as err:
            raise PlaneError(f"{err}; log {component.log}: {component.last_line()}") from None

    def _add(self, name: str, argv: list[str], env: Mapping[str, str] | None = None) -> Component:
        try:
            binary = pins.binary(argv[0])
        except FileNotFoundError as err:
            raise PlaneError(str(err)) from None
        component = Component(name, [str(binary), *argv[1:]], self.artifacts / f"{name}.log", dict(env or {}))
        self.components[name] = component
        component.start()
        return component

    # ------------------------------------------------------------------ the components

    def _start_etcd(self) -> None:
        p, peer = self.ports["etcd"], self.ports["etcd-peer"]
        etcd = self._add(
            "etcd",
            [
                "etcd",
                "--name=realplane",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls=http://127.0.0.1:{p}",
                f"--advertise-client-urls=http://127.0.0.1:{p}",
                f"--listen-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                f"--initial-cluster=realplane=http://127.0.0.1:{peer}",
                "--unsafe-no-fsync",  # a throw-away store: no fsync cost on a shared 2-core machine
                "--log-level=warn",
            ],
        )
        self._ready(etcd, f"http://127.0.0.1:{p}/readyz")

    def _start_apiserver(self) -> None:
        pki = self.pki
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(_AUDIT_POLICY))
        apiserver = self._add(
            "kube-apiserver",
            [
                "kube-apiserver",
                f"--etcd-servers=http://127.0.0.1:{self.ports['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.ports['apiserver']}",
                f"--cert-dir={self.workdir / 'apiserver'}",
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
                f"--audit-policy-file={policy}",
                f"--audit-log-path={self.artifacts / 'audit.log'}",
                "--audit-log-maxsize=200",
            ],
        )
        self._ready(apiserver, f"{self.server}/readyz", client_cert=True, verify=True)

    def _start_control_plane_program(self, name: str, port_name: str, health: str, flags: list[str]) -> None:
        """kube-controller-manager or kube-scheduler, as its own user (``system:<name>``),
        authorized by the API server's bootstrap RBAC as in a real cluster."""
        port = self.ports[port_name]
        kubeconfig = self.kubeconfig_for(f"system:{name}", groups=())
        program = self._add(
            name,
            [
                name,
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                f"--secure-port={port}",
                f"--cert-dir={self.workdir / name}",
                *flags,
            ],
        )
        self._ready(program, f"https://127.0.0.1:{port}/{health}")

    def _start_controller_manager(self) -> None:
        self._start_control_plane_program(
            "kube-controller-manager",
            "controller-manager",
            "healthz",
            [
                "--controllers=*",  # every default one: disruption, garbagecollector, job, namespace, ...
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={self.pki.sa_key}",
                f"--root-ca-file={self.pki.ca_cert}",
            ],
        )

    def _start_scheduler(self) -> None:
        self._start_control_plane_program("kube-scheduler", "scheduler", "readyz", [])

    def _kwok_config(self) -> Path:
        stages = sorted((pins.share_dir() / "kwok-stages").glob("*.yaml"))
        if not self.complete_jobs:
            stages = [p for p in stages if p.name != "pod-complete.yaml"]
        cluster_exec = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterExec",
            "metadata": {"name": "local"},
            "spec": {
                "execs": [
                    {
                        "local": {
                            "workDir": str(self.exec_dir),
                            "envs": [{"name": "REALPLANE_SIGNALS", "value": str(self.signals)}],
                        }
                    }
                ]
            },
        }
        docs = [p.read_text() for p in stages] + [yaml.safe_dump(cluster_exec)]
        path = self.workdir / "kwok.yaml"
        path.write_text("\n---\n".join(docs))
        return path

    def _prepare_kwok(self) -> None:
        shims = self.workdir / "exec-bin"
        shims.mkdir()
        (shims / "kill").write_text(_KILL_SHIM)
        (shims / "kill").chmod(0o755)
        self.exec_dir.mkdir()

    def _start_kwok(self) -> None:
        port = self.ports["kwok"]
        shims = self.workdir / "exec-bin"
        kwok = self._add(
            "kwok",
            [
                "kwok",
                f"--kubeconfig={self.kubeconfig_for('kwok')}",
                f"--config={self._kwok_config()}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
                "--node-ip=127.0.0.1",
                f"--node-port={port}",
                f"--server-address=127.0.0.1:{port}",
                f"--tls-cert-file={self.pki.kubelet_cert}",
                f"--tls-private-key-file={self.pki.kubelet_key}",
                "--node-lease-duration-seconds=40",
            ],
            # an exec'd command is looked up on KWOK's own PATH: the shims come first
            env={"PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '/usr/bin:/bin')}"},
        )
        self._ready(kwok, f"https://127.0.0.1:{port}/healthz")

    def _install_karpenter_objects(self) -> None:
        """Karpenter's CRDs (Established), the KWOKNodeClass ``default`` and the NodePools."""
        from kubernetes import client

        self.install_crds("karpenter-crds")
        custom: Any = client.CustomObjectsApi(self.api_client())
        custom.create_cluster_custom_object(
            "karpenter.kwok.sh",
            "v1alpha1",
            "kwoknodeclasses",
            {"apiVersion": "karpenter.kwok.sh/v1alpha1", "kind": "KWOKNodeClass", "metadata": {"name": "default"}},
        )
        for pool in self.nodepools:
            custom.create_cluster_custom_object("karpenter.sh", "v1", "nodepools", pool)

    def install_crds(self, folder: str) -> None:
        """The CRDs the build copied into ``share/<folder>``, each waited for until Established."""
        from kubernetes import client

        ext: Any = client.ApiextensionsV1Api(self.api_client())
        names = []
        for path in sorted((pins.share_dir() / folder).glob("*.yaml")):
            crd = yaml.safe_load(path.read_text())
            ext.create_custom_resource_definition(crd)
            names.append(crd["metadata"]["name"])
        for name in names:
            self.wait_for(f"CRD {name} Established", partial(_established, ext, name), timeout=self.ready_timeout)

    def _start_karpenter(self) -> None:
        from kubernetes import client

        custom: Any = client.CustomObjectsApi(self.api_client())
        health = self.ports["karpenter"]
        karpenter = self._add(
            "karpenter",
            ["karpenter-kwok"],
            env={
                "KUBECONFIG": str(self.kubeconfig_for("karpenter")),
                "DISABLE_LEADER_ELECTION": "true",
                "INSTANCE_TYPES_FILE_PATH": str(INSTANCE_TYPES),
                "HEALTH_PROBE_PORT": str(health),
                "METRICS_PORT": str(self.ports["karpenter-metrics"]),
                "LOG_LEVEL": "debug",
            },
        )
        self._ready(karpenter, f"http://127.0.0.1:{health}/readyz")
        # The node class is Ready once Karpenter's status controller has seen it: before that
        # Karpenter launches nothing for the NodePools that use it.
        self.wait_for(
            "KWOKNodeClass default Ready",
            partial(
                _custom_condition, custom, ("karpenter.kwok.sh", "v1alpha1", "kwoknodeclasses", "default"), "Ready"
            ),
            timeout=self.ready_timeout,
        )
        for pool in self.nodepools:
            name = pool["metadata"]["name"]
            self.wait_for(
                f"NodePool {name} Ready",
                partial(_custom_condition, custom, ("karpenter.sh", "v1", "nodepools", name), "Ready"),
                timeout=self.ready_timeout,
            )


def _bind_failed(log: Path, since: int) -> bool:
    """The component's log, from byte ``since``, says a port it was given was taken."""
    with log.open("rb") as f:
        f.seek(since)
        return b"address already in use" in f.read()


def _insecure() -> ssl.SSLContext:
    """For the controller-manager's and scheduler's self-signed health endpoints only."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _established(ext: Any, name: str) -> bool:
    crd = ext.read_custom_resource_definition(name)
    return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))


def _custom_condition(custom: Any, ref: tuple[str, str, str, str], kind: str) -> bool:
    return _condition(custom.get_cluster_custom_object(*ref), kind)


def _condition(obj: Mapping[str, Any], kind: str) -> bool:
    return any(c.get("type") == kind and c.get("status") == "True" for c in obj.get("status", {}).get("conditions", []))


_SIGTERM_INSTALLED = False


def _stop_on_sigterm() -> None:
    """SIGTERM (CI's or a user's kill) exits through Python, so atexit and finalizers stop the plane."""
    global _SIGTERM_INSTALLED
    if _SIGTERM_INSTALLED or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _exit_on_signal)
    _SIGTERM_INSTALLED = True


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def dump(obj: Any) -> str:
    """JSON for an assertion message: without managedFields, cut at 4,000 characters."""
    return dump_full(obj)[:4000]


def dump_full(obj: Any) -> str:
    """JSON of Kubernetes objects without their managedFields."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "managedFields"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    return json.dumps(strip(obj), indent=1, default=str)
