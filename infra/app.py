"""CDK entry point: ``python -m infra.app`` (see cdk.json). Synthesizes offline, without Docker."""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from aws_cdk import App, Validations
from cdk_nag import AwsSolutionsChecks

from infra.config import Settings, SettingsError
from infra.stacks.gpuwarden_stack import GpuwardenStack

#: the construct id; the deployed CloudFormation stack name carries the cluster (infra/config.py
#: `stack_name`: `Gpuwarden-<cluster>` or `-c stackName=…`), so several clusters share an account
STACK_NAME = "GpuwardenStack"


def build_app(*, outdir: str | None = None, context: Mapping[str, Any] | None = None) -> App:
    """The app with its stack and the cdk-nag AwsSolutions checks (run on every synth).

    Writes to ``cdk.out`` unless the CDK CLI asks for another directory (``cdk synth -o``).
    """
    app = App(outdir=outdir or os.environ.get("CDK_OUTDIR") or "cdk.out", context=dict(context) if context else None)
    settings = Settings.from_context(app.node)
    GpuwardenStack(
        app,
        STACK_NAME,
        stack_name=settings.stack_name,
        settings=settings,
        description="gpuwarden: event-driven GPU node protection for EKS",
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app


def main() -> None:
    """`cdk synth` / `cdk deploy`: a context value or a policy that does not validate is said in
    its own lines (the key, what was given, what is allowed), exit 2, without a Python traceback."""
    try:
        app = build_app()
    except SettingsError as err:
        sys.stderr.write(f"gpuwarden: cdk: {err}\n")
        raise SystemExit(2) from None
    app.synth()


if __name__ == "__main__":
    main()
