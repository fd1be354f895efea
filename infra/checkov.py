"""checkov on the synthesized templates, offline: ``make synth`` and tests/infra run it this way.

checkov lives in its own virtual environment (``.venv-checkov``, pinned in
``infra/checkov-requirements.txt``): it pins ``boto3==1.35.49`` exactly (and ``networkx<2.7``,
``packaging<24``), so beside gpuwarden's dependencies it would downgrade the boto3/botocore that
gpuwarden's code and moto tests run against (1.44) by a year of API models.

No network: ``--skip-download`` and ``BC_SKIP_MAPPING`` skip the policy metadata and guideline
downloads, ``CKV_SKIP_PACKAGE_UPDATE_CHECK`` the version check; with no API key nothing is
uploaded. Findings are answered on the resources themselves (``Metadata.checkov.skip``, written
by :func:`infra.components.acknowledge.checkov_skip`); checkov exits 1 on any other.

``python -m infra.checkov install`` creates the environment; ``python -m infra.checkov FILE...`` scans.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VENV = REPO_ROOT / ".venv-checkov"
REQUIREMENTS = Path(__file__).with_name("checkov-requirements.txt")
EXECUTABLE = VENV / "bin" / "checkov"
OFFLINE_ENV = {"BC_SKIP_MAPPING": "TRUE", "CKV_SKIP_PACKAGE_UPDATE_CHECK": "true"}


def command(templates: Sequence[str | Path], *, output: str = "cli") -> list[str]:
    """The scan of CloudFormation ``templates``; ``output`` is checkov's ``-o`` (cli, json, …)."""
    # at a terminal only the failures (and the summary); JSON keeps the passed and skipped checks too
    terse = ["--quiet", "--compact"] if output == "cli" else []
    return [
        str(EXECUTABLE),
        "--framework",
        "cloudformation",
        "--skip-download",
        *terse,
        "-o",
        output,
        "-f",
        *map(str, templates),
    ]


def scan(templates: Sequence[str | Path], *, output: str = "cli") -> subprocess.CompletedProcess[str]:
    """Run the scan; exit code 0 when every finding is fixed or acknowledged, 1 otherwise."""
    return subprocess.run(  # noqa: S603 (our own argv, no shell)
        command(templates, output=output),
        env={**os.environ, **OFFLINE_ENV},
        capture_output=True,
        text=True,
        check=False,
    )


def install() -> None:
    """Create ``.venv-checkov`` with the pinned checkov (``make synth`` does this once)."""
    if not (VENV / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)  # noqa: S603
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "-r", str(REQUIREMENTS)], check=True)  # noqa: S603


def main(argv: Sequence[str]) -> int:
    if list(argv) == ["install"]:
        install()
        return 0
    if not argv:
        print("usage: python -m infra.checkov install | FILE.template.json ...", file=sys.stderr)
        return 2
    proc = scan(argv)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
