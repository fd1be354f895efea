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

This module runs the plane; by concern: its processes (`process`), PKI (`certs`), the control
plane's programs (`control_plane`), KWOK (`kwok`), Karpenter (`karpenter`), and the dumps of
Kubernetes objects for assertion messages (`dumps`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Collection, Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import yaml

from realplane.build import pins
from realplane.plane import control_plane, karpenter, kwok
from realplane.plane import jobset as jobset_module
from realplane.plane.certs import client_cert, make_pki, serving_cert
from realplane.plane.control_plane import CLUSTER_NAME
from realplane.plane.dumps import dump, dump_full
from realplane.plane.karpenter import NODE_CLASS_REF, tour_nodepool
from realplane.plane.kwok import KWOK_NODE_ANNOTATION
from realplane.plane.process import Component, PlaneError, bind_failed, free_port, insecure, stop_on_sigterm

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

__all__ = [
    "CLUSTER_NAME",
    "KWOK_NODE_ANNOTATION",
    "NODE_CLASS_REF",
    "Plane",
    "PlaneError",
    "dump",
    "dump_full",
    "tour_nodepool",
]

T = TypeVar("T")

READY_TIMEOUT = 90.0


class Plane:
    """The real control plane. ``with Plane(...) as plane:`` starts it and always stops it."""

    def __init__(
        self,
        artifacts: Path,
        *,
        nodepools: Iterable[Mapping[str, Any]] | None = None,
        karpenter: bool = True,
        karpenter_pin: str = "karpenter",
        complete_jobs: bool = False,
        jobset: bool = False,
        kubelet_deletes: bool = False,
        ready_timeout: float = READY_TIMEOUT,
    ) -> None:
        self.artifacts = artifacts
        self._audit_from = 0  # `mark_audit`: where `audit` starts reading, and from when
        self._audit_since = ""
        self.nodepools = [dict(p) for p in nodepools] if nodepools is not None else [tour_nodepool()]
        self.with_karpenter = karpenter
        #: The Karpenter that runs, by pins.toml section ("karpenter-oldest": docs/realplane.md, "Karpenter versions")
        self.karpenter = pins.KARPENTERS[karpenter_pin]
        #: KWOK's pod-complete stage: a Job's pod Succeeds as soon as it runs. Off by default, so
        #: a training pod runs until it is evicted or deleted, as a long training run does.
        self.complete_jobs = complete_jobs
        #: JobSet's CRD (jobset.x-k8s.io) and its controller with its webhooks (realplane/plane/jobset.py).
        self.jobset = jobset
        #: A deleted pod goes to phase Failed at the end of its grace and leaves once its finalizers are
        #: gone, as a kubelet would (kwok.KUBELET_DELETE); off: KWOK deletes it at once.
        self.kubelet_deletes = kubelet_deletes
        self.ready_timeout = ready_timeout
        self.workdir = Path(tempfile.mkdtemp(prefix="realplane-"))
        self.components: dict[str, Component] = {}
        self.ports = {
            name: free_port()
            for name in ("etcd", "etcd-peer", "apiserver", "controller-manager", "scheduler", "kwok", "karpenter")
        }
        self.ports["karpenter-metrics"] = free_port()
        if jobset:
            self.ports.update({name: free_port() for name in jobset_module.PORTS})
        self.pki = make_pki(self.workdir / "pki")
        self.server = f"https://127.0.0.1:{self.ports['apiserver']}"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        #: Every kubeconfig written, by path: (user, certificate, key); rewritten if the port moves.
        self._kubeconfigs: dict[Path, tuple[str, Path, Path]] = {
            self.kubeconfig: ("admin", self.pki.admin_cert, self.pki.admin_key)
        }
        self._write_kubeconfigs()
        #: Every `kill` a `signal:` checkpoint ran through pods/exec (`kwok`'s shim).
        self.signals = self.artifacts / "signals.log"
        self.exec_dir = self.workdir / "exec"
        self._shims = self.workdir / "exec-bin"
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
        if unbuilt := pins.not_built(pins.MAIN, self.karpenter):
            raise PlaneError(unbuilt)
        self.artifacts.mkdir(parents=True, exist_ok=True)
        for old in self.artifacts.glob("*.log"):  # a previous run's logs: this run's start empty
            old.unlink()
        self.signals.touch()
        atexit.register(self.stop)
        stop_on_sigterm()
        self._start(self._start_etcd, "etcd", ("etcd", "etcd-peer"))
        self._start(self._start_apiserver, "kube-apiserver", ("apiserver",))
        self._start(self._start_controller_manager, "kube-controller-manager", ("controller-manager",))
        self._start(self._start_scheduler, "kube-scheduler", ("scheduler",))
        self._prepare_kwok()
        self._start(self._start_kwok, "kwok", ("kwok",))
        if self.jobset:
            self.install_crds("jobset-crds")
            self._start(self._start_jobset, "jobset-controller", jobset_module.PORTS)
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
                if attempt == tries or component is None or component.running or not bind_failed(log, mark):
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
            path.write_text(yaml.safe_dump(control_plane.kubeconfig(self.server, self.pki.ca_cert, user, cert, key)))

    def mark_audit(self) -> None:
        """From now on `audit` answers only what follows: a scene on a plane shared by several
        reads its own requests (names repeat across scenes: a Deployment's pods, a Job's)."""
        path = self.artifacts / "audit.log"
        self._audit_from = path.stat().st_size if path.exists() else 0
        # a long request (an exec stream) is logged when it completes: one received before the
        # mark may be written after it
        self._audit_since = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def audit(self) -> list[dict[str, Any]]:
        """Every request the API server has answered since `mark_audit` (audit events at ResponseComplete),
        oldest first: ``user.username``, ``verb``, ``objectRef``, ``responseStatus.code``, ..."""
        events = []
        with (self.artifacts / "audit.log").open("rb") as raw:
            size = raw.seek(0, 2)
            raw.seek(self._audit_from if self._audit_from <= size else 0)
            for line in raw.read().decode("utf-8").splitlines():
                try:  # a server stopped mid-write leaves a cut line, glued to the next one it writes
                    event = json.loads(line[max(line.rfind('{"kind":"Event"'), 0) :])
                except json.JSONDecodeError:
                    continue  # the last line, still being written
                received = str(event.get("requestReceivedTimestamp", ""))
                if event.get("stage") == "ResponseComplete" and received >= self._audit_since:
                    events.append(event)
        return events

    def wait_for(
        self,
        what: str,
        check: Callable[[], T | None],
        timeout: float = 60.0,
        interval: float = 0.1,
        *,
        stopped: Collection[str] = (),
    ) -> T:
        """Poll ``check`` until it returns something truthy; fail in one line naming ``what``.

        A component of the plane that exits meanwhile fails it at once, naming the component
        (``stopped``: those a scene stopped on purpose)."""
        deadline = time.monotonic() + timeout
        last_error = ""
        while True:
            for component in self.components.values():
                if not component.running and component.name not in stopped:
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
        self.components[name].stop()
        self.start_again(name)

    def start_again(self, name: str) -> None:
        """Start the stopped component ``name`` with the same flags, ports and store; return once
        it is ready (from the main thread: `Component.start`)."""
        component = self.components[name]
        component.start()
        url, client_cert, verify = self._probes[name]
        self._ready(component, url, client_cert=client_cert, verify=verify)

    def _ready(self, component: Component, url: str, *, client_cert: bool = False, verify: bool = False) -> None:
        self._probes[component.name] = (url, client_cert, verify)
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert)) if verify else insecure()
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
        p = self.ports["etcd"]
        etcd = self._add("etcd", control_plane.etcd_argv(self.workdir, p, self.ports["etcd-peer"]))
        self._ready(etcd, f"http://127.0.0.1:{p}/readyz")

    def _start_apiserver(self) -> None:
        policy = self.workdir / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump(control_plane.AUDIT_POLICY))
        argv = control_plane.apiserver_argv(self.workdir, self.artifacts, self.pki, self.ports, policy)
        apiserver = self._add("kube-apiserver", argv)
        self._ready(apiserver, f"{self.server}/readyz", client_cert=True, verify=True)

    def _start_control_plane_program(self, name: str, port_name: str, health: str, flags: list[str]) -> None:
        port = self.ports[port_name]
        kubeconfig = self.kubeconfig_for(f"system:{name}", groups=())
        program = self._add(name, control_plane.program_argv(name, kubeconfig, port, self.workdir, flags))
        self._ready(program, f"https://127.0.0.1:{port}/{health}")

    def _start_controller_manager(self) -> None:
        flags = control_plane.controller_manager_flags(self.pki)
        self._start_control_plane_program("kube-controller-manager", "controller-manager", "healthz", flags)

    def _start_scheduler(self) -> None:
        self._start_control_plane_program("kube-scheduler", "scheduler", "readyz", [])

    def _prepare_kwok(self) -> None:
        kwok.prepare(self._shims, self.exec_dir)

    def _start_kwok(self) -> None:
        port = self.ports["kwok"]
        config = kwok.config(
            self.workdir,
            self.exec_dir,
            self.signals,
            complete_jobs=self.complete_jobs,
            kubelet_deletes=self.kubelet_deletes,
            frequent_node_status=self.karpenter is not pins.MAIN,  # v1.0's registration: kwok.FREQUENT_NODE_STATUS
        )
        argv = kwok.argv(self.kubeconfig_for("kwok"), config, port, self.pki)
        started = self._add("kwok", argv, env=kwok.environment(self._shims))
        self._ready(started, f"https://127.0.0.1:{port}/healthz")

    def _install_karpenter_objects(self) -> None:
        karpenter.install_objects(self.api_client(), self.nodepools, self.wait_for, self.ready_timeout, self.karpenter)

    def install_crds(self, folder: str) -> None:
        """The CRDs the build copied into ``share/<folder>``, each waited for until Established."""
        karpenter.install_crds(self.api_client(), folder, self.wait_for, self.ready_timeout)

    def _start_karpenter(self) -> None:
        health, metrics = self.ports["karpenter"], self.ports["karpenter-metrics"]
        env = karpenter.environment(self.kubeconfig_for("karpenter"), health, metrics, self.karpenter)
        started = self._add("karpenter", [pins.karpenter_binary(self.karpenter)], env=env)
        self._ready(started, f"http://127.0.0.1:{health}/readyz")
        karpenter.wait_ready(self.api_client(), self.nodepools, self.wait_for, self.ready_timeout)

    def _start_jobset(self) -> None:
        """JobSet's controller, ready once its webhook server listens; then its webhook
        configurations, waited for until the API server calls them (realplane/plane/jobset.py)."""
        cert_dir = self.workdir / "jobset-certs"
        serving_cert(self.pki, "jobset-webhook", cert_dir)
        config = jobset_module.config(self.workdir, self.ports, cert_dir)
        env = {"KUBECONFIG": str(self.kubeconfig_for("jobset-controller"))}
        started = self._add("jobset-controller", jobset_module.argv(config), env=env)
        self._ready(started, f"http://127.0.0.1:{self.ports['jobset-health']}/readyz")
        api = self.api_client()
        jobset_module.install_webhooks(api, self.ports["jobset-webhook"], self.pki.ca_cert)
        self.wait_for(
            "JobSet's webhooks called by the API server",
            lambda: jobset_module.defaulted(api),
            timeout=self.ready_timeout,
        )
