"""AWS's EventBridge matching engine, Event Ruler (``software.amazon.event.ruler:event-ruler``), as a judge
of the synthesized rules (tests/infra/test_event_ruler.py, docs/events.md "Judged by Event Ruler").

``Judge.java`` (its own Maven project, ``pom.xml`` here) reads a whole table of rules and events on
stdin and answers which rules match each event, in one JVM. The jar is built with the machine's Maven
into ``.cache/event-ruler/<key of the sources>/`` (gitignored): an unchanged build is a file check.
``make setup``/``make test`` build it (``python -m tests.ruler.judge``); where Java 17 or Maven is
missing, the error says how to install them (CI, as root, gets Debian's packages from the Makefile).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
SOURCES = (HERE / "pom.xml", HERE / "src/main/java/gpuwarden/ruler/Judge.java")
CACHE = ROOT / ".cache" / "event-ruler"
INSTALL_HINT = (
    "Event Ruler's judge needs Java 17 and Maven: on Debian/Ubuntu "
    "`sudo apt-get install openjdk-17-jdk-headless maven` (make setup does it when run as root)"
)


class RulerUnavailable(RuntimeError):
    """Java or Maven is missing, or the build failed: the message says what to do."""


def _key() -> str:
    digest = hashlib.sha256()
    for source in SOURCES:
        digest.update(source.read_bytes())
    return digest.hexdigest()[:16]


def jar() -> Path:
    """The built judge, building it first when its sources changed (Maven Central on a cold cache)."""
    built = CACHE / _key() / "ruler-judge.jar"
    if built.exists():
        return built
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:  # one build at a time (two test workers)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not built.exists():
            _build(built)
    return built


def _build(built: Path) -> None:
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise RulerUnavailable(f"{' and '.join(missing)} not found. {INSTALL_HINT}")
    run = subprocess.run(
        ["mvn", "-q", "-B", "package", "-DskipTests", "-f", str(HERE / "pom.xml")],
        capture_output=True,
        text=True,
        check=False,
    )
    made = HERE / "target" / "ruler-judge.jar"
    if run.returncode != 0 or not made.exists():
        raise RulerUnavailable(
            f"the Event Ruler judge did not build (mvn rc={run.returncode}):\n{run.stdout}{run.stderr}"
        )
    built.parent.mkdir(parents=True, exist_ok=True)
    partial = built.with_suffix(".partial")
    shutil.copyfile(made, partial)
    partial.replace(built)


def judge(rules: Mapping[str, Any], events: Sequence[Any]) -> list[frozenset[str]]:
    """For each event, the names of the ``rules`` (name → EventBridge pattern) Event Ruler matches."""
    table = json.dumps({"rules": dict(rules), "events": list(events)})
    run = subprocess.run(
        ["java", "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-jar", str(jar())],
        input=table,
        capture_output=True,
        text=True,
        check=False,
    )
    if run.returncode != 0:
        raise RulerUnavailable(f"Event Ruler failed (rc={run.returncode}): {run.stderr.strip()}")
    answer: dict[str, list[list[str]]] = json.loads(run.stdout)
    return [frozenset(row) for row in answer["matches"]]


if __name__ == "__main__":
    try:
        print(f"Event Ruler judge: {jar().relative_to(ROOT)}")
    except RulerUnavailable as error:
        sys.exit(f"make: {error}")
