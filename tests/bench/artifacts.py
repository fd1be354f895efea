"""6. Artifact sizes: the runtime layer (zipped, unzipped) and the function code asset."""

from __future__ import annotations

import fnmatch
import os
import tempfile
import zipfile
from pathlib import Path

from infra.components.bundling import CODE_EXCLUDES
from tests.bench.common import FUNCTIONS, Figure, Skipped

LAMBDA_UNZIPPED_LIMIT_MB = 250.0
MB = 1024 * 1024
SMALLEST: dict[str, object] = {}  # one size: the artifacts as built


def _files(root: Path, excludes: tuple[str, ...] = ()) -> list[Path]:
    found = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_file() and not any(fnmatch.fnmatch(part, pat) for part in rel.parts for pat in excludes):
            found.append(path)
    return found


def _sizes(root: Path, files: list[Path]) -> tuple[float, float]:
    unzipped = sum(f.stat().st_size for f in files)
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "asset.zip"
        with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
            for f in files:
                zf.write(f, f.relative_to(root))
        zipped = os.path.getsize(target)
    return unzipped / MB, zipped / MB


def _one(name: str, value: float, goal: float | None = None, note: str = "") -> Figure:
    met = None if goal is None else value <= goal
    return Figure(name, "MB", value, value, value, 1, None if goal is None else f"<= {goal:g} MB", met, "size", value,
                  note)  # fmt: skip


def measure() -> list[Figure]:
    from layers.runtime import build as layer_build

    figures = []
    try:
        layer = layer_build.build_layer()
    except layer_build.LayerBuildError as err:
        raise Skipped(f"layer not built: {str(err).splitlines()[0]}") from err
    files = _files(layer.path, (".complete",))
    unzipped, zipped = _sizes(layer.path, files)
    figures.append(_one("layer unzipped", unzipped, LAMBDA_UNZIPPED_LIMIT_MB, f"{len(files)} files (Lambda limit "
                        "250 MB unzipped, layer + code)"))  # fmt: skip
    figures.append(_one("layer zipped", zipped))
    code = _files(FUNCTIONS, CODE_EXCLUDES)
    code_unzipped, code_zipped = _sizes(FUNCTIONS, code)
    figures.append(_one("function code unzipped", code_unzipped, note=f"{len(code)} files, functions/ without caches"))
    figures.append(_one("function code zipped", code_zipped))
    return figures
