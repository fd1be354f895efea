"""The real plane's pins, its Go modules and where its binaries are cached (docs/realplane.md).

``realplane/build/pins.toml`` holds the versions. Each Go module under ``realplane/build/go/`` builds some of
the binaries. The cache directory is keyed by a hash of the pins and of the modules' files
(go.mod, go.sum, our own ``.go`` files) and of the build flags, so a binary is rebuilt only when
one of those changes; the harness finds the binaries by the same key, without needing Go.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PINS_FILE = HERE / "pins.toml"
GO_DIR = HERE / "go"
# Where the binaries go: <cache>/<key>/bin. GPUWARDEN_REALPLANE_CACHE moves it (e.g. to share one
# build between work trees); by default it is the gitignored .cache/realplane of this checkout.
CACHE_ENV = "GPUWARDEN_REALPLANE_CACHE"
# Changing how we build (flags, naming) must rebuild: this string is part of the key.
BUILD_SCHEME = "go build -trimpath -ldflags=-s -w, versions stamped; v2"
HOW_TO_BUILD = "make setup-real"


@dataclass(frozen=True)
class GoModule:
    """One Go module of ours under realplane/build/go/<name>: the packages it builds, as binary name -> package."""

    name: str
    binaries: dict[str, str]

    @property
    def path(self) -> Path:
        return GO_DIR / self.name


# kube: Kubernetes' three control-plane programs and etcd (the etcd Kubernetes itself requires,
# so both share one module). kwok and karpenter each need their own module: kwok v0.8 is built on
# k8s.io/* v0.36 and Karpenter on v0.35, and one module would force one version on both.
MODULES = (
    GoModule(
        "kube",
        {
            "etcd": "gpuwarden/realplane/kube/cmd/etcd",
            "kube-apiserver": "k8s.io/kubernetes/cmd/kube-apiserver",
            "kube-controller-manager": "k8s.io/kubernetes/cmd/kube-controller-manager",
            "kube-scheduler": "k8s.io/kubernetes/cmd/kube-scheduler",
        },
    ),
    GoModule("kwok", {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}),
    GoModule("karpenter", {"karpenter-kwok": "sigs.k8s.io/karpenter/kwok"}),
    # JobSet's controller manager: the main package at its module's root (controllers and webhooks)
    GoModule("jobset", {"jobset-controller": "sigs.k8s.io/jobset"}),
)
BINARIES = tuple(name for module in MODULES for name in module.binaries)


def load_pins() -> dict[str, dict[str, str]]:
    with PINS_FILE.open("rb") as f:
        return tomllib.load(f)


def _key_files() -> list[Path]:
    files = [PINS_FILE]
    for module in MODULES:
        files += sorted(
            p for p in module.path.rglob("*") if p.is_file() and (p.suffix == ".go" or p.name in ("go.mod", "go.sum"))
        )
    return files


def cache_key() -> str:
    digest = hashlib.sha256(BUILD_SCHEME.encode())
    for path in _key_files():
        digest.update(str(path.relative_to(HERE)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or ROOT / ".cache" / "realplane")


def key_dir() -> Path:
    return cache_root() / cache_key()


def bin_dir() -> Path:
    return key_dir() / "bin"


def share_dir() -> Path:
    """Files the build copies out of the pinned modules: KWOK's default stages, Karpenter's CRDs."""
    return key_dir() / "share"


# What the build copies into share/<folder>, from a module's directory in the module cache, as
# folder: (pins.toml section, patterns): KWOK's default stages as kwokctl installs them (node
# initialize, heartbeat with a lease, and the "fast" pod stages: ready, complete, delete),
# Karpenter's CRDs with the KWOK provider's, JobSet's CRD, and JobSet's webhook configurations
# (the kubebuilder manifests and the kustomize patches that give its pod webhooks their
# objectSelector), which realplane/plane/jobset.py points at the controller on loopback.
SHARE = {
    "kwok-stages": (
        "kwok",
        (
            "kustomize/stage/node/fast/node-initialize.yaml",
            "kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
            "kustomize/stage/pod/fast/pod-ready.yaml",
            "kustomize/stage/pod/fast/pod-complete.yaml",
            "kustomize/stage/pod/fast/pod-delete.yaml",
        ),
    ),
    "karpenter-crds": ("karpenter", ("pkg/apis/crds/*.yaml", "kwok/apis/crds/*.yaml")),
    "jobset-crds": ("jobset", ("config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml",)),
    "jobset-webhooks": (
        "jobset",
        ("config/components/webhook/manifests.yaml", "config/components/webhook/patches/*-patch.yaml"),
    ),
}


def share_complete() -> bool:
    return (share_dir() / "COMPLETE").is_file()


def missing_binaries() -> list[str]:
    where = bin_dir()
    return [name for name in BINARIES if not os.access(where / name, os.X_OK)]


def binary(name: str) -> Path:
    """The path of one built binary; a one-line error naming it and how to build it if absent."""
    path = bin_dir() / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"real plane: {name} is not built at {path} (run `{HOW_TO_BUILD}`)")
    return path
