"""`make bench`: every benchmark on the simulator, one table, and tests/bench/results.json.

Benchmarks print figures; they are not timed tests and never fail on a missed goal. The
command fails only when a benchmark cannot run at all for a reason other than a clear skip
(kubectl absent, no layer build).

    python -m tests.bench.run [--smallest]
        [--only cold,latency,drain,mass,gangs,memory,artifacts,soak,gpu_health,realplane,scale]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.bench.common import Figure, Skipped

RESULTS = Path(__file__).resolve().parent / "results.json"


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(), "platform": platform.platform()}


#: Every benchmark: its module, whose ``measure(**sizes)`` answers its figures (and details), and
#: whose ``SMALLEST`` are the sizes that run each of its set-ups once, quickly (`run_one`).
BENCHES: dict[str, str] = {
    "cold": "tests.bench.cold_start",
    "latency": "tests.bench.latency",
    "drain": "tests.bench.drain_vs_kubectl",
    "mass": "tests.bench.mass",
    "gangs": "tests.bench.gangs",
    "memory": "tests.bench.memory",
    "artifacts": "tests.bench.artifacts",
    "soak": "tests.bench.soak",
    "gpu_health": "tests.bench.gpu_health",
    "realplane": "tests.bench.realplane",
    "scale": "tests.bench.scale",
}


def run_one(name: str, *, smallest: bool = False) -> tuple[list[Figure], dict[str, Any]]:
    """One benchmark at its full sizes, or at its smallest (`SMALLEST`): every set-up executed
    once, the figures meaningless but present (tests/bench/test_setups.py runs them in `make test`)."""
    module = importlib.import_module(BENCHES[name])
    sizes: dict[str, Any] = module.SMALLEST if smallest else {}
    found = module.measure(**sizes)
    figures, details = found if isinstance(found, tuple) else (found, {})
    return list(figures), dict(details)


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "-"
    if abs(value) >= 100 or value == int(value):
        return f"{value:.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.2f}"


def table(figures: Sequence[Figure]) -> str:
    head = ("figure", "unit", "value", "median", "min", "max", "runs", "goal", "met")
    rows = [
        (
            f.name,
            f.unit,
            f"{_fmt(f.value)} ({f.stat})",
            _fmt(f.median),
            _fmt(f.min),
            _fmt(f.max),
            str(f.runs),
            f.goal or "",
            "" if f.met is None else ("yes" if f.met else "NO"),
        )
        for f in figures
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.bench.run", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--only", default=",".join(BENCHES), help="comma-separated: " + ", ".join(BENCHES))
    parser.add_argument(
        "--smallest",
        action="store_true",
        help="each benchmark at its smallest sizes: checks that every set-up runs (figures meaningless, "
        "results.json not written)",
    )
    args = parser.parse_args(argv)
    chosen = [name.strip() for name in args.only.split(",") if name.strip()]
    unknown = [n for n in chosen if n not in BENCHES]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    started = time.perf_counter()
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    failed: dict[str, str] = {}
    for name in chosen:
        print(f"[bench] {name} …", file=sys.stderr, flush=True)
        begun = time.perf_counter()
        try:
            found, more = run_one(name, smallest=args.smallest)
        except Skipped as reason:
            skipped[name] = str(reason)
            print(f"[bench] SKIPPED {name}: {reason}", file=sys.stderr, flush=True)
            continue
        except Exception:
            failed[name] = traceback.format_exc()
            print(f"[bench] FAILED {name}:\n{failed[name]}", file=sys.stderr, flush=True)
            continue
        figures += found
        details[name] = more
        print(f"[bench] {name} done in {time.perf_counter() - begun:.1f} s", file=sys.stderr, flush=True)
    report = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "seconds": round(time.perf_counter() - started, 1),
        "figures": [f.as_dict() for f in figures],
        "skipped": skipped,
        "failed": {k: v.splitlines()[-1] for k, v in failed.items()},
        "details": details,
    }
    if not args.smallest:
        RESULTS.write_text(json.dumps(report, indent=2, default=str) + "\n")
    info = machine()
    print(f"\ngpuwarden benchmarks, {report['date']}, {info['nproc']} x {info['cpu']}, {report['seconds']} s\n")
    print(table(figures))
    for f in figures:
        if f.note:
            print(f"- {f.name}: {f.note}")
    for name, why in skipped.items():
        print(f"SKIPPED {name}: {why}")
    for name in failed:
        print(f"FAILED {name} (see stderr)")
    print("\n--smallest: nothing written" if args.smallest else f"\nwritten: {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
