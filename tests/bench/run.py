"""`make bench`: every benchmark on the simulator, one table, and tests/bench/results.json.

Benchmarks print figures; they are not timed tests and never fail on a missed goal. The
command fails only when a benchmark cannot run at all for a reason other than a clear skip
(kubectl absent, no layer build).

    python -m tests.bench.run [--only cold,latency,drain,mass,gangs,memory,artifacts,soak,gpu_health,realplane]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
from collections.abc import Callable, Sequence
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


def _cold() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import cold_start

    return cold_start.measure()


def _latency() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import latency

    return latency.measure(), {}


def _drain() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import drain_vs_kubectl

    return drain_vs_kubectl.measure()


def _mass() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import mass

    return mass.measure()


def _gangs() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import gangs

    return gangs.measure()


def _memory() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import memory

    return memory.measure(), {}


def _artifacts() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import artifacts

    return artifacts.measure(), {}


def _soak() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import soak

    return soak.measure()


def _gpu_health() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import gpu_health

    return gpu_health.measure()


def _realplane() -> tuple[list[Figure], dict[str, Any]]:
    from tests.bench import realplane

    return realplane.measure()


BENCHES: dict[str, Callable[[], tuple[list[Figure], dict[str, Any]]]] = {
    "cold": _cold,
    "latency": _latency,
    "drain": _drain,
    "mass": _mass,
    "gangs": _gangs,
    "memory": _memory,
    "artifacts": _artifacts,
    "soak": _soak,
    "gpu_health": _gpu_health,
    "realplane": _realplane,
}


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
            found, more = BENCHES[name]()
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
    print(f"\nwritten: {RESULTS}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
