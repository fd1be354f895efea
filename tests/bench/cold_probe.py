"""Child process of the cold-start benchmark: one Lambda cold start, measured from the inside.

Run as a script by the interpreter under test (the layer's Python 3.13 with ``-I -S``, or the
venv's Python), never imported by the benchmark itself:

    python -I -S cold_probe.py HANDLER EVENT_JSON PATH [PATH ...]

HANDLER is the function's handler as the stack deploys it (``gpuwarden.handlers.drain.handler``).

PATHs go first on ``sys.path`` (the function code, then the layer's ``python/``), as the
Lambda runtime puts ``/var/task`` and ``/opt/python``. Prints one line
``COLD {"import": s, "call": s, "total": s, "maxrss_mb": …}`` after the handler's own output.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import importlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402


class _Context:
    """The attributes Powertools' inject_lambda_context reads from a LambdaContext (name and memory
    from the variables the Lambda runtime sets, when the probe was given them)."""

    function_name = os.environ.get("AWS_LAMBDA_FUNCTION_NAME", "gpuwarden-bench")
    function_version = "$LATEST"
    invoked_function_arn = f"arn:aws:lambda:us-west-2:123456789012:function:{function_name}"
    memory_limit_in_mb = int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "512"))
    aws_request_id = "00000000-0000-0000-0000-000000000000"
    log_group_name = f"/aws/lambda/{function_name}"
    log_stream_name = "bench"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 300_000


def main(argv: list[str]) -> int:
    handler, event_path, *paths = argv
    module_name, function = handler.rsplit(".", 1)
    sys.path[:0] = paths
    with open(event_path, encoding="utf-8") as fh:
        event = json.load(fh)
    before = len(sys.modules)
    module = importlib.import_module(module_name)
    imported = time.perf_counter()
    result = getattr(module, function)(event, _Context())
    done = time.perf_counter()
    figures = {
        "import": imported - STARTED,
        "call": done - imported,
        "total": done - STARTED,
        "cpu": time.process_time(),  # this process's own CPU since it started, interpreter start-up included
        "modules": len(sys.modules) - before,
        "kubernetes_model_modules": sum(1 for m in sys.modules if m.startswith("kubernetes.client.models.")),
        "boto3_imported": "boto3" in sys.modules,
        "xray_imported": "aws_xray_sdk" in sys.modules,
        "outcome": result.get("outcome") if isinstance(result, dict) else None,
        "done": result.get("done") if isinstance(result, dict) else None,
    }
    figures["maxrss_mb"] = _peak_rss_mb()
    print("COLD " + json.dumps(figures), flush=True)
    return 0


def _peak_rss_mb() -> float:
    """This process's own peak RSS: `VmHWM` of its memory map. Not `ru_maxrss`: Linux carries the
    high-water mark of the map a process had before exec into it, and subprocess starts the probe
    with vfork, so ru_maxrss reported the benchmark's parent (227 MB after the mass benchmark,
    51 MB run alone)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
