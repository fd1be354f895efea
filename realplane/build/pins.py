"""The real plane's pins, its Go modules and where its binaries are cached (docs/realplane.md).

``realplane/build/pins.toml`` holds the versions. Each Go module under ``realplane/build/go/`` builds some of
the binaries. The modules come in sets (``SETS``): the plane's own (``MAIN``: Kubernetes, KWOK,
Karpenter, JobSet) and a second Karpenter pin (``KARPENTER_OLDEST``). Each set's cache directory is
keyed by a hash of its own pins and of its modules' files (go.mod, go.sum, our own ``.go`` files,
the files its build overlays) and of the build flags, so a set is rebuilt only when one of those
changes; the harness finds the binaries by the same key, without needing Go.
"""

from __future__ import annotations

import hashlib
import os
import tomllib
from dataclasses import dataclass, field
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
    """One Go module of ours under realplane/build/go/<name>: the packages it builds, as binary name -> package;
    ``overlay``: files of the pinned module the build replaces with ours (`go build -overlay`), as
    path inside the module -> our file."""

    name: str
    binaries: dict[str, str]
    overlay: dict[str, Path] = field(default_factory=dict)

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


@dataclass(frozen=True)
class PinSet:
    """Go modules built, cached and keyed together: ``sections`` are their pins.toml sections,
    ``share`` what the build copies out of the pinned modules (``SHARE`` below)."""

    name: str
    modules: tuple[GoModule, ...]
    sections: tuple[str, ...]
    share: dict[str, tuple[str, tuple[str, ...]]]

    @property
    def binaries(self) -> tuple[str, ...]:
        return tuple(name for module in self.modules for name in module.binaries)


def _key_files(pin_set: PinSet) -> list[tuple[str, Path]]:
    """(name in the key, file): each module's go.mod, go.sum and .go files, and what it overlays."""
    files = []
    for module in pin_set.modules:
        files += sorted(
            (f"{module.name}/{p.relative_to(module.path)}", p)
            for p in module.path.rglob("*")
            if p.is_file() and (p.suffix == ".go" or p.name in ("go.mod", "go.sum"))
        )
        files += [(f"{module.name} overlays {inside}", module.overlay[inside]) for inside in sorted(module.overlay)]
    return files


def cache_key(pin_set: PinSet | None = None) -> str:
    """The set's own pins (not the whole pins.toml: a pin of another set leaves this key alone),
    its modules' files and the build scheme."""
    pin_set = pin_set or MAIN
    pinned = load_pins()
    digest = hashlib.sha256(BUILD_SCHEME.encode() + b"\0" + pin_set.name.encode())
    for section in pin_set.sections:
        digest.update(f"[{section}] {pinned[section]['module']} {pinned[section]['version']}\0".encode())
    for name, path in _key_files(pin_set):
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or ROOT / ".cache" / "realplane")


def key_dir(pin_set: PinSet | None = None) -> Path:
    return cache_root() / cache_key(pin_set)


def bin_dir(pin_set: PinSet | None = None) -> Path:
    return key_dir(pin_set) / "bin"


def share_dir(pin_set: PinSet | None = None) -> Path:
    """Files the build copies out of the pinned modules: KWOK's default stages, Karpenter's CRDs."""
    return key_dir(pin_set) / "share"


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


# The second Karpenter pin: its KWOK provider and its CRDs. Its KWOK provider reads its instance
# types only from the file it embeds (kwok/cloudprovider/helpers.go `rawInstanceTypes` in v1.0),
# so the build replaces that file with the plane's.
OLDEST_MODULE = GoModule(
    "karpenter-oldest",
    {"karpenter-kwok-oldest": "sigs.k8s.io/karpenter/kwok"},
    overlay={"kwok/cloudprovider/instance_types.json": ROOT / "realplane" / "plane" / "instance_types.json"},
)
MAIN = PinSet(
    "main",
    MODULES,
    ("kubernetes", "etcd", "kwok", "karpenter", "jobset"),
    SHARE,
)
KARPENTER_OLDEST = PinSet(
    "karpenter-oldest",
    (OLDEST_MODULE,),
    ("karpenter-oldest",),
    {"karpenter-crds": ("karpenter-oldest", ("pkg/apis/crds/*.yaml", "kwok/apis/crds/*.yaml"))},
)
SETS = (MAIN, KARPENTER_OLDEST)


def karpenter_binary(pin_set: PinSet) -> str:
    """The Karpenter (KWOK provider) binary a set builds: ``karpenter-kwok``, ``karpenter-kwok-oldest``."""
    (name,) = [name for name in pin_set.binaries if name.startswith("karpenter-kwok")]
    return name


#: The Karpenter a plane runs, by pins.toml section: its set holds its binary and its CRDs.
KARPENTERS = {"karpenter": MAIN, "karpenter-oldest": KARPENTER_OLDEST}


def share_complete(pin_set: PinSet | None = None) -> bool:
    return (share_dir(pin_set) / "COMPLETE").is_file()


def missing_binaries(pin_set: PinSet | None = None) -> list[str]:
    pin_set = pin_set or MAIN
    where = bin_dir(pin_set)
    return [name for name in pin_set.binaries if not os.access(where / name, os.X_OK)]


def not_built(*pin_sets: PinSet) -> str | None:
    """What of these sets is not built, in one line naming it and how to build it; None if all is."""
    for pin_set in [s for s in SETS if any(s is wanted for wanted in pin_sets)]:
        missing = missing_binaries(pin_set)
        if missing or not share_complete(pin_set):
            what = ", ".join(missing) if missing else "KWOK's stages and Karpenter's CRDs"
            return f"real plane: {what} not built in {key_dir(pin_set)} (run `{HOW_TO_BUILD}`)"
    return None


def binary(name: str) -> Path:
    """The path of one built binary (in the set that builds it); a one-line error naming it and how
    to build it if absent."""
    pin_set = next(s for s in SETS if name in s.binaries)
    path = bin_dir(pin_set) / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"real plane: {name} is not built at {path} (run `{HOW_TO_BUILD}`)")
    return path
