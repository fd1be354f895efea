"""The manifests the docs show, read from the docs themselves, so that a test of "the docs' Job"
breaks when the page changes."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

DOCS = Path(__file__).resolve().parents[1] / "docs"


def docs_manifest(page: str, section: str) -> dict[str, Any]:
    """The first ```yaml block after the heading ``section`` of ``docs/<page>``."""
    text = (DOCS / page).read_text(encoding="utf-8")
    assert f"## {section}" in text, f"docs/{page}: no section {section!r}"
    found = re.search(r"```yaml\n(.*?)```", text.split(f"## {section}", 1)[1], re.S)
    assert found, f"docs/{page}, {section!r}: no yaml block"
    manifest: dict[str, Any] = yaml.safe_load(found.group(1))
    return manifest


def docs_indexed_job() -> dict[str, Any]:
    """docs/training-jobs.md's four-rank Indexed Job, but for what no sandbox has a controller for:
    its checkpoint volume's PersistentVolumeClaim (no storage provisioner) becomes an emptyDir."""
    job = docs_manifest("training-jobs.md", "An Indexed Job, opted in")
    for volume in job["spec"]["template"]["spec"]["volumes"]:
        if "persistentVolumeClaim" in volume:
            del volume["persistentVolumeClaim"]
            volume["emptyDir"] = {}
    return job
