"""Local (no Docker) bundling for the layer and the function code.

CDK calls ``try_bundle`` of an ``ILocalBundling``; returning True means "done, do not run
Docker". Both bundlers here always return True or raise: a missing wheel cache or Python 3.13
is an error that says how to fix it, never a silent fallback to Docker.

Both assets use a custom asset hash computed here, so CDK skips bundling entirely when
``cdk.out/asset.<hash>`` already exists (repeated synths cost nothing).
"""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import AssetHashType, BundlingOptions, DockerImage, ILocalBundling
from aws_cdk import aws_lambda as lambda_

from layers.runtime import build as layer_build

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS_DIR = REPO_ROOT / "functions"
LAYER_DIR = REPO_ROOT / "layers" / "runtime"

#: never shipped to Lambda from functions/
CODE_EXCLUDES = ("__pycache__", "*.pyc", "*.egg-info", ".mypy_cache", ".pytest_cache", "tests")
#: Docker is never used; this image name only satisfies BundlingOptions' required field
_NO_DOCKER = DockerImage.from_registry("gpuwarden/local-bundling-only")


@jsii.implements(ILocalBundling)
class LayerBundling:
    """Copies the cached layer build (``python/...``) into the asset directory."""

    def __init__(self, build: layer_build.LayerBuild) -> None:
        self._build = build

    def try_bundle(self, output_dir: str, *_args: Any, **_options: Any) -> bool:
        layer_build.copy_tree(self._build.path, Path(output_dir))
        return True


@jsii.implements(ILocalBundling)
class FunctionCodeBundling:
    """Copies ``functions/`` (without caches) and compiles it with the Lambda's Python."""

    def __init__(self, source: Path, python: str) -> None:
        self._source = source
        self._python = python

    def try_bundle(self, output_dir: str, *_args: Any, **_options: Any) -> bool:
        out = Path(output_dir)
        shutil.copytree(self._source, out, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*CODE_EXCLUDES))
        layer_build.compile_bytecode(self._python, out)
        return True


def layer_code(architecture: str, *, skip: bool) -> lambda_.Code:
    """The layer asset: the cached offline build for the Lambda's Python and architecture."""
    if skip:
        # synth without bundling (tests without a wheel cache): a stable placeholder hash
        return lambda_.Code.from_asset(
            str(LAYER_DIR),
            asset_hash_type=AssetHashType.CUSTOM,
            asset_hash=f"unbundled-layer-{architecture}",
            exclude=["build", "__pycache__"],
        )
    build = layer_build.build_layer(architecture)
    return lambda_.Code.from_asset(
        str(LAYER_DIR),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=build.key,
        bundling=BundlingOptions(image=_NO_DOCKER, local=LayerBundling(build)),
    )


def function_code(*, skip: bool) -> lambda_.Code:
    """The function code asset: ``functions/`` with .pyc compiled by Python 3.13 (unchecked-hash)."""
    if skip:
        return lambda_.Code.from_asset(str(FUNCTIONS_DIR), exclude=list(CODE_EXCLUDES))
    python = layer_build.find_lambda_python()
    return lambda_.Code.from_asset(
        str(FUNCTIONS_DIR),
        asset_hash_type=AssetHashType.CUSTOM,
        asset_hash=source_hash(FUNCTIONS_DIR, python),
        bundling=BundlingOptions(image=_NO_DOCKER, local=FunctionCodeBundling(FUNCTIONS_DIR, python)),
    )


def source_hash(root: Path, python: str) -> str:
    """Hash of the files that go into the code asset (paths and contents) and the compiler."""
    version = layer_build.interpreter_version(python)
    digest = hashlib.sha256(f"{layer_build.RECIPE_VERSION}\0{version}\0".encode())
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if not path.is_file() or _excluded(rel):
            continue
        digest.update(str(rel).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _excluded(rel: Path) -> bool:
    return any(fnmatch.fnmatch(part, pattern) for part in rel.parts for pattern in CODE_EXCLUDES)
