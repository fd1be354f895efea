"""Build the gpuwarden runtime dependency layer offline, without Docker.

Three steps, each its own flag:

``--lock``
    Resolve ``[project].dependencies`` from pyproject.toml *together with boto3* for the
    Lambda's Python (3.13, manylinux) and write exact pins to ``requirements.txt``
    (``pip install --dry-run --report``). Needs the network; run it by hand when the
    dependencies change, then commit requirements.txt.
``--fetch``
    Download the manylinux wheels pinned in requirements.txt into the local wheel cache
    (``layers/runtime/build/wheels/<arch>/``). The only network step of a normal build;
    ``make setup`` runs it.
(default) / ``--build``
    Install from the wheel cache only (``--no-index``) into ``<out>/python``, strip what
    Lambda never imports, and compile ``.pyc`` with a Python 3.13 interpreter using
    ``--invalidation-mode unchecked-hash`` (the CDK CLI zips assets with fixed mtimes, so
    timestamp-checked .pyc files would be ignored after deploy). The result is cached by a
    hash of requirements.txt, the architecture, the interpreter and this build's recipe, so
    a repeated synth costs a directory copy.

The CDK app calls :func:`build_layer` from its local bundler (``infra/components/runtime_layer.py``).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent
PYPROJECT = REPO_ROOT / "pyproject.toml"
REQUIREMENTS = HERE / "requirements.txt"
BUILD_DIR = HERE / "build"
WHEEL_CACHE = BUILD_DIR / "wheels"
LAYER_CACHE = BUILD_DIR / "layer"

LAMBDA_PYTHON = "3.13"
#: bump when the recipe below changes, so cached builds are not reused
RECIPE_VERSION = "2"
#: always resolved beside the runtime deps: the Lambda runtime and moto bring botocore, whose
#: python-dateutil<3 pin is what rules out kubernetes 37.0.2 (kubernetes 37.0.2 needs python-dateutil>=3, botocore <3)
RESOLVE_WITH = ("boto3",)
#: runtime dependencies of the `gpuwarden` console script only: no Lambda handler imports them
#: (tests/infra/test_layer_build.py proves it), so the layer leaves them out
CONSOLE_ONLY = ("click",)

_PLATFORMS = {
    # manylinux2014 == manylinux_2_17; Lambda's Python 3.13 runs on Amazon Linux 2023 (glibc 2.34)
    "x86_64": ("manylinux2014_x86_64", "manylinux_2_28_x86_64", "manylinux_2_34_x86_64"),
    "arm64": ("manylinux2014_aarch64", "manylinux_2_28_aarch64", "manylinux_2_34_aarch64"),
}

# What Lambda never imports. Only exact paths are listed, each checked by hand:
# - bin/: console scripts pip writes beside --target (no PATH in a layer)
# - websocket/tests, certifi/tests: the packages' own test suites
# - kubernetes/aio: the asyncio client generated beside the sync one (64 MB of 119 MB);
#   `import kubernetes` does not import it and gpuwarden uses the sync client only
#   (adapters/kube.py). aiohttp itself stays: small, and it is a declared dependency.
# botocore/data and boto3/data are the API models and must stay.
_STRIP_DIRS = ("__pycache__",)
_STRIP_PATHS = ("bin", "websocket/tests", "certifi/tests", "kubernetes/aio")
#: imported by the Lambda's interpreter after every fresh build: a strip that went too far fails here
SMOKE_IMPORTS = (
    "boto3",
    "botocore.session",
    "kubernetes.client",
    "kubernetes.config",
    "kubernetes.stream",
    "kubernetes.watch",
    "pydantic",
    "yaml",
    "dateutil.parser",
    "aws_lambda_powertools",
    "aws_lambda_powertools.utilities.parser",
)


class LayerBuildError(RuntimeError):
    """The layer cannot be built; the message says what to do."""


@dataclass(frozen=True)
class LayerBuild:
    path: Path  # the directory holding ``python/``, ready to be the layer asset
    key: str  # cache key (also used as the CDK asset hash)
    cached: bool


def _log(msg: str) -> None:
    print(f"[layer] {msg}", file=sys.stderr, flush=True)


def _platforms(arch: str) -> tuple[str, ...]:
    try:
        return _PLATFORMS[arch]
    except KeyError:
        known = sorted(_PLATFORMS)
        raise LayerBuildError(f"unknown Lambda architecture {arch!r}; use one of {known}") from None


def _platform_args(arch: str) -> list[str]:
    args: list[str] = []
    for platform in _platforms(arch):
        args += ["--platform", platform]
    return [
        *args,
        "--python-version",
        LAMBDA_PYTHON,
        "--implementation",
        "cp",
        "--only-binary=:all:",
    ]


def _pip(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise LayerBuildError(f"pip failed ({' '.join(cmd)}):\n{proc.stdout}\n{proc.stderr}")
    return proc


# --------------------------------------------------------------------------- interpreter


def _python_version(python: str) -> str | None:
    try:
        proc = subprocess.run(  # noqa: S603
            [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def _pyenv_candidates() -> Iterable[str]:
    pyenv = shutil.which("pyenv")
    roots: list[Path] = []
    if os.environ.get("PYENV_ROOT"):
        roots.append(Path(os.environ["PYENV_ROOT"]))
    if pyenv:
        proc = subprocess.run([pyenv, "root"], capture_output=True, text=True, check=False)  # noqa: S603
        if proc.returncode == 0 and proc.stdout.strip():
            roots.append(Path(proc.stdout.strip()))
    roots.append(Path.home() / ".pyenv")
    for root in roots:
        versions = sorted(
            (root / "versions").glob(f"{LAMBDA_PYTHON}.*"),
            key=lambda p: [int(x) if x.isdigit() else -1 for x in p.name.split(".")],
            reverse=True,
        )
        for version in versions:
            exe = version / "bin" / f"python{LAMBDA_PYTHON}"
            if exe.exists():
                yield str(exe)


def find_lambda_python() -> str:
    """The Python 3.13 interpreter that writes the layer's bytecode.

    ``GPUWARDEN_LAYER_PYTHON``, else pyenv's newest 3.13.x, else ``python3.13`` on PATH.
    """
    explicit = os.environ.get("GPUWARDEN_LAYER_PYTHON")
    if explicit:
        version = _python_version(explicit)
        if version != LAMBDA_PYTHON:
            raise LayerBuildError(
                f"GPUWARDEN_LAYER_PYTHON={explicit} is Python {version or '(not runnable)'}, "
                f"but the layer's bytecode must be compiled by Python {LAMBDA_PYTHON}"
            )
        return explicit
    candidates = list(_pyenv_candidates())
    on_path = shutil.which(f"python{LAMBDA_PYTHON}")
    if on_path:
        candidates.append(on_path)
    for candidate in candidates:
        if _python_version(candidate) == LAMBDA_PYTHON:
            return candidate
    raise LayerBuildError(
        f"no Python {LAMBDA_PYTHON} interpreter found to compile the layer's bytecode for the "
        f"Lambda runtime: install it (`pyenv install {LAMBDA_PYTHON}`) or set "
        "GPUWARDEN_LAYER_PYTHON=/path/to/python3.13"
    )


# --------------------------------------------------------------------------- lock


def runtime_dependencies(pyproject: Path = PYPROJECT) -> list[str]:
    with pyproject.open("rb") as fh:
        data = tomllib.load(fh)
    deps = data["project"]["dependencies"]
    assert isinstance(deps, list)
    return [str(d) for d in deps if re.split(r"[=<>!~ ;\[]", str(d), maxsplit=1)[0] not in CONSOLE_ONLY]


def lock(arch: str = "x86_64") -> str:
    """Resolve the runtime deps plus boto3 for Lambda's Python; write exact pins."""
    requirements = list(dict.fromkeys([*runtime_dependencies(), *RESOLVE_WITH]))
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _pip(
            [
                "install",
                "--dry-run",
                "--quiet",
                "--ignore-installed",
                "--report",
                str(report),
                *_platform_args(arch),
                *requirements,
            ]
        )
        installs = json.loads(report.read_text())["install"]
    pins = sorted(
        (f"{item['metadata']['name']}=={item['metadata']['version']}" for item in installs),
        key=str.lower,
    )
    header = [
        "# Generated by `python -m layers.runtime.build --lock` -- do not edit by hand.",
        f"# Resolved for CPython {LAMBDA_PYTHON} / manylinux from pyproject.toml [project].dependencies",
        "# together with boto3 (botocore pins python-dateutil<3; kubernetes 37.0.2 needs >=3).",
        *(f"#   {req}" for req in requirements),
    ]
    text = "\n".join([*header, *pins]) + "\n"
    REQUIREMENTS.write_text(text)
    return text


# --------------------------------------------------------------------------- fetch


def wheel_dir(arch: str) -> Path:
    return WHEEL_CACHE / arch


def _pinned(requirements: Path = REQUIREMENTS) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in requirements.read_text().splitlines())
    return [line for line in lines if line]


def _wheel_cache_complete(arch: str) -> bool:
    cache = wheel_dir(arch)
    if not cache.is_dir():
        return False
    have = {_normalise(w.name.split("-", 1)[0]) for w in cache.glob("*.whl")}
    return all(_normalise(re.split(r"[=<>!~ ;\[]", pin, maxsplit=1)[0]) in have for pin in _pinned())


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def fetch(arch: str = "x86_64") -> Path:
    """Download the pinned manylinux wheels (the only network step)."""
    dest = wheel_dir(arch)
    dest.mkdir(parents=True, exist_ok=True)
    _pip(
        [
            "download",
            "--quiet",
            "--no-deps",  # requirements.txt is a complete lock
            "--dest",
            str(dest),
            *_platform_args(arch),
            "-r",
            str(REQUIREMENTS),
        ]
    )
    return dest


# --------------------------------------------------------------------------- build


def cache_key(arch: str, python: str) -> str:
    digest = hashlib.sha256()
    digest.update(REQUIREMENTS.read_bytes())
    digest.update(f"\0{arch}\0{RECIPE_VERSION}\0".encode())
    digest.update(interpreter_version(python).encode())
    return digest.hexdigest()[:32]


@functools.cache
def interpreter_version(python: str) -> str:
    proc = subprocess.run(  # noqa: S603
        [python, "-c", "import sys; print(sys.version)"], capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


def _strip(site: Path) -> None:
    for name in _STRIP_DIRS:
        for found in sorted(site.rglob(name), reverse=True):
            if found.is_dir():
                shutil.rmtree(found)
    for rel in _STRIP_PATHS:
        target = site / rel
        if target.is_dir():
            shutil.rmtree(target)


def compile_bytecode(python: str, target: Path) -> None:
    """Compile with the Lambda's interpreter; unchecked-hash survives fixed zip mtimes."""
    subprocess.run(  # noqa: S603
        [python, "-m", "compileall", "-q", "--invalidation-mode", "unchecked-hash", "-j", "0", str(target)],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def smoke_test(python: str, site: Path) -> None:
    """Import the runtime's entry points from the built layer alone (``-I -S``: no site-packages)."""
    code = f"import sys; sys.path.insert(0, {str(site)!r}); import " + ", ".join(SMOKE_IMPORTS)
    proc = subprocess.run([python, "-I", "-S", "-c", code], capture_output=True, text=True, check=False)  # noqa: S603
    if proc.returncode != 0:
        raise LayerBuildError(f"the built layer does not import under {python}:\n{proc.stderr}")


def build_layer(arch: str = "x86_64", *, python: str | None = None) -> LayerBuild:
    """Build (or reuse) the layer directory; returns the directory that holds ``python/``."""
    if not REQUIREMENTS.exists():
        raise LayerBuildError(f"{REQUIREMENTS} is missing: run `python -m layers.runtime.build --lock`")
    python = python or find_lambda_python()
    key = cache_key(arch, python)
    out = LAYER_CACHE / key
    if (out / ".complete").exists():
        return LayerBuild(path=out, key=key, cached=True)
    if not _wheel_cache_complete(arch):
        raise LayerBuildError(
            f"the layer's wheel cache {wheel_dir(arch)} is missing or incomplete for {REQUIREMENTS.name}: "
            "run `make setup` (or `python -m layers.runtime.build --fetch`) once, with network access"
        )
    LAYER_CACHE.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=LAYER_CACHE))
    try:
        site = tmp / "python"
        _pip(
            [
                "install",
                "--quiet",
                "--no-index",
                "--no-compile",
                "--no-deps",
                "--find-links",
                str(wheel_dir(arch)),
                *_platform_args(arch),
                "--target",
                str(site),
                "-r",
                str(REQUIREMENTS),
            ]
        )
        _strip(site)
        compile_bytecode(python, site)
        smoke_test(python, site)
        (tmp / ".complete").write_text(key + "\n")
        if out.exists():  # a concurrent build won the race
            shutil.rmtree(tmp)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _prune(keep=key)
    return LayerBuild(path=out, key=key, cached=False)


def _prune(keep: str) -> None:
    """Drop older cached builds (each is ~100 MB)."""
    for old in LAYER_CACHE.iterdir():
        if old.name != keep and not old.name.startswith(".") and old.is_dir():
            shutil.rmtree(old, ignore_errors=True)


def copy_tree(src: Path, dest: Path) -> None:
    """Copy ``src`` into ``dest`` by hard links where possible (same file system), else by copy."""

    def link_or_copy(s: str, d: str) -> object:
        try:
            os.link(s, d)
        except OSError:
            shutil.copy2(s, d)
        return d

    shutil.copytree(src, dest, copy_function=link_or_copy, dirs_exist_ok=True, ignore=_ignore_marker)


def _ignore_marker(directory: str, names: list[str]) -> set[str]:
    return {".complete"} & set(names)


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n", 1)[0]
    parser = argparse.ArgumentParser(prog="python -m layers.runtime.build", description=summary)
    parser.add_argument("--arch", default="x86_64", choices=sorted(_PLATFORMS))
    parser.add_argument("--lock", action="store_true", help="re-resolve requirements.txt (network)")
    parser.add_argument("--fetch", action="store_true", help="download the wheel cache (network)")
    parser.add_argument("--build", action="store_true", help="build the layer (default if no other flag)")
    args = parser.parse_args(argv)
    try:
        if args.lock:
            lock(args.arch)
            _log(f"wrote {REQUIREMENTS}")
        if args.fetch:
            _log(f"wheels in {fetch(args.arch)}")
        if args.build or not (args.lock or args.fetch):
            start = time.perf_counter()
            result = build_layer(args.arch)
            state = "cached" if result.cached else "built"
            _log(f"{state} {result.path} in {time.perf_counter() - start:.1f}s")
    except LayerBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
