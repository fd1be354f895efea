"""The simulator (`sim/`) for the commands that run on it (`gpuwarden demo`).

The simulator is part of the source checkout, not of the package: the wheel (and the Lambda
asset) ship `gpuwarden` alone. A command that needs it imports it through `simulator()`, which
finds it where the package was installed from a checkout (`pip install -e .`, or running from
the repository) and otherwise stops with one line saying so: no traceback, exit code 1.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import click

#: functions/gpuwarden/checkout.py -> the repository root
_ROOT = Path(__file__).resolve().parents[2]


def source_checkout() -> Path | None:
    """The repository this package runs from, when it runs from one that holds the simulator."""
    if (_ROOT / "sim" / "__init__.py").is_file() and (_ROOT / "functions" / "gpuwarden").is_dir():
        return _ROOT
    return None


def simulator(module: str = "sim") -> ModuleType:
    """Import ``module`` of the simulator (``"sim.demo"``), or exit with a one-line reason."""
    if importlib.util.find_spec("sim") is None:
        root = source_checkout()
        if root is None:
            raise click.ClickException(
                "this command needs the simulator (sim/), which ships with the source checkout only, "
                "not with the installed package: run it from a clone of the repository (make demo)"
            )
        sys.path.append(str(root))
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == "sim":
            raise
        raise click.ClickException(
            f"the simulator needs the development dependencies (no module {err.name!r}): pip install -e '.[dev]'"
        ) from err
