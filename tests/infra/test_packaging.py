"""What `pip install .` gives a user: the `gpuwarden` package and its CDK construct (infra/, layers/;
no sim/ or tests/),
a console script whose dependencies are runtime dependencies, and a demo that says clearly that
it needs the source checkout. The Lambda layer stays lean: console-only dependencies (click)
are left out of it, and no handler imports them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

from layers.runtime import build as layer_build

REPO = Path(__file__).resolve().parents[2]
HANDLERS = sorted(p.stem for p in (REPO / "functions" / "gpuwarden" / "handlers").glob("*.py") if p.stem != "__init__")


def source_copy(where: Path) -> Path:
    """The checkout's sources, copied (setuptools builds in the source tree: build/, *.egg-info must
    not land in the checkout), with every package the wheel must leave out beside the one it holds."""
    tree = where / "src"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "cdk.out", "node_modules")
    for package in ("functions", "sim", "infra", "layers", "tests"):
        shutil.copytree(REPO / package, tree / package, ignore=skip)
    return tree


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built offline with the build backend already installed."""
    out = tmp_path_factory.mktemp("wheel")
    tree = source_copy(out)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(tree)],
        check=True,
        capture_output=True,
        text=True,
        timeout=180,
    )
    (built,) = out.glob("gpuwarden-*.whl")
    return built


def test_the_wheel_holds_gpuwarden_and_its_cdk_construct_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    # infra/ and layers/: the `Gpuwarden` construct of the `cdk` extra (docs/deploy.md, "In your own CDK app")
    assert top == {"gpuwarden", "infra", "layers", next(t for t in top if t.endswith(".dist-info"))}, top
    assert "gpuwarden/cli.py" in names
    assert "gpuwarden/handlers/interruption.py" in names
    assert "infra/construct.py" in names
    assert not [n for n in names if n.startswith(("sim/", "tests/", "realplane/"))]


def test_the_console_scripts_dependencies_are_runtime_dependencies(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        meta_name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        metadata = Parser().parsestr(archive.read(meta_name).decode())
        entry_points = archive.read(meta_name.replace("METADATA", "entry_points.txt")).decode()
    requires = metadata.get_all("Requires-Dist") or []
    unconditional = [r for r in requires if "extra ==" not in r]
    assert any(r.startswith("click") for r in unconditional), requires
    assert "gpuwarden = gpuwarden.cli:main" in entry_points


def test_the_installed_demo_says_it_needs_the_source_checkout(wheel: Path, tmp_path: Path) -> None:
    # Given the wheel's own files (not the checkout's) first on the path, run outside the checkout
    unpacked = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(unpacked)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": str(unpacked)}
    run = subprocess.run(
        [sys.executable, "-c", "from gpuwarden.cli import main; main()", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    # Then one line says why, with no traceback, and the exit code is not 0
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines() == [
        "Error: this command needs the simulator (sim/), which ships with the source checkout only, not with "
        "the installed package: run it from a clone of the repository (make demo)"
    ]


def test_the_layer_leaves_console_only_dependencies_out() -> None:
    pins = {line.split("==")[0].lower() for line in layer_build.REQUIREMENTS.read_text().splitlines() if "==" in line}
    assert "click" in layer_build.CONSOLE_ONLY
    assert "click" not in pins
    assert not [d for d in layer_build.runtime_dependencies() if d.startswith("click")]


def test_no_lambda_handler_imports_a_console_only_dependency() -> None:
    # Every handler module imports with click made unimportable, as in the Lambda layer
    blocked = "; ".join(f"sys.modules[{name!r}] = None" for name in layer_build.CONSOLE_ONLY)
    imports = "; ".join(f"importlib.import_module('gpuwarden.handlers.{h}')" for h in HANDLERS)
    code = f"import importlib, sys; {blocked}; {imports}"
    env = dict(os.environ) | {"POWERTOOLS_METRICS_NAMESPACE": "Test", "AWS_DEFAULT_REGION": "us-west-2"}
    run = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert run.returncode == 0, run.stderr[-2000:]


@pytest.mark.long
def test_pip_install_gives_a_gpuwarden_command_that_starts(tmp_path: Path) -> None:
    # Given a fresh virtual environment and `pip install .` (no extras), from pip's configured sources
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    pip = subprocess.run(
        [str(env_dir / "bin" / "python"), "-m", "pip", "install", "-q", str(source_copy(tmp_path))],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if pip.returncode != 0 and "No matching distribution" in pip.stderr:
        pytest.skip(f"no package index reachable for the dependencies: {pip.stderr.strip().splitlines()[-1]}")
    assert pip.returncode == 0, pip.stderr[-3000:]
    gpuwarden = env_dir / "bin" / "gpuwarden"
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KUBECONFIG") and not k.startswith("AWS_")}
    # Then --help starts, and invoke runs the event to a JSON failure (no cluster), not an ImportError
    helped = subprocess.run([str(gpuwarden), "--help"], capture_output=True, text=True, env=clean, check=False)
    assert helped.returncode == 0, helped.stderr
    assert "invoke" in helped.stdout
    invoked = subprocess.run(
        [str(gpuwarden), "invoke", str(REPO / "events" / "spot-interruption.json")],
        capture_output=True,
        text=True,
        env=clean,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert invoked.returncode == 1, invoked.stderr
    assert '"outcome": "failed"' in invoked.stdout
    assert "ModuleNotFoundError" not in invoked.stderr
    assert "Traceback" not in invoked.stderr
    demo = subprocess.run(
        [str(gpuwarden), "demo"], capture_output=True, text=True, env=clean, cwd=tmp_path, check=False
    )
    assert demo.returncode == 1
    assert "source checkout" in demo.stderr
    assert "Traceback" not in demo.stderr
