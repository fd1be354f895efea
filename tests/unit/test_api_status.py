"""Reading the API server's answers (adapters/api_status.py)."""

from __future__ import annotations

import json

import pytest

from gpuwarden.adapters.api_status import exec_exit_code

# the Status kube-apiserver writes on an exec's status channel (remotecommand v4 protocol)
SUCCESS = {"metadata": {}, "status": "Success"}
NON_ZERO = {
    "metadata": {},
    "status": "Failure",
    "message": "command terminated with non-zero exit code: error executing command [sh -c exit 3]: exit status 3",
    "reason": "NonZeroExitCode",
    "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
}
NO_CODE = {"metadata": {}, "status": "Failure", "message": "container not found", "reason": "InternalError"}


@pytest.mark.parametrize(
    ("channel", "code"),
    [
        (json.dumps(SUCCESS), 0),
        (json.dumps(NON_ZERO), 3),
        (json.dumps(NO_CODE), None),
        ("", None),
        ("not json", None),
        ("[1, 2]", None),
        (json.dumps({"status": "Failure", "details": {"causes": [{"reason": "ExitCode", "message": "x"}]}}), None),
    ],
)
def test_an_exec_status_channel_gives_its_exit_code_or_none(channel: str, code: int | None) -> None:
    assert exec_exit_code(channel) == code
