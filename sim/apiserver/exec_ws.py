"""``pods/exec`` over WebSocket (RFC 6455) with the Kubernetes channel subprotocols.

Server frames are unmasked binary frames whose first byte is the channel:
1 stdout, 2 stderr, 3 error/status (a ``Status`` JSON from v4 on). v5 adds the
close-channel signal (channel 255) that a client may send; it is accepted and ignored.
"""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import BinaryIO

WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
SUPPORTED_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")


@dataclass(frozen=True)
class ExecRecord:
    namespace: str
    pod: str
    container: str
    command: list[str]
    time: datetime  # sim time of the call
    stdin: bool = False
    tty: bool = False
    protocol: str = ""


@dataclass(frozen=True)
class ExecResult:
    exit_code: int = 0
    stdout: str | bytes = ""
    stderr: str | bytes = ""


ExecHandler = Callable[[ExecRecord], ExecResult]


def default_exec_handler(_record: ExecRecord) -> ExecResult:
    return ExecResult()


def accept_key(key: str) -> str:
    digest = hashlib.sha1((key + WS_GUID).encode(), usedforsecurity=False).digest()
    return base64.b64encode(digest).decode()


def choose_protocol(offered_headers: list[str]) -> str | None:
    offered = [p.strip() for h in offered_headers for p in h.split(",") if p.strip()]
    for proto in SUPPORTED_PROTOCOLS:  # highest first
        if proto in offered:
            return proto
    return None


def encode_frame(payload: bytes, opcode: int = 0x2) -> bytes:
    head = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


def read_frame(rfile: BinaryIO) -> tuple[int, bytes] | None:
    """One frame from the client (masked); None on EOF."""
    head = rfile.read(2)
    if len(head) < 2:
        return None
    opcode = head[0] & 0x0F
    masked = head[1] & 0x80
    n = head[1] & 0x7F
    if n == 126:
        n = struct.unpack("!H", rfile.read(2))[0]
    elif n == 127:
        n = struct.unpack("!Q", rfile.read(8))[0]
    mask = rfile.read(4) if masked else b""
    data = rfile.read(n)
    if masked:
        data = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
    return opcode, data


def status_json(exit_code: int, command: list[str]) -> bytes:
    if exit_code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    return json.dumps(
        {
            "metadata": {},
            "status": "Failure",
            "message": f"command terminated with non-zero exit code: error executing command "
            f"[{' '.join(command)}], exit code {exit_code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]},
        }
    ).encode()


@dataclass
class ExecSession:
    """Drives one upgraded connection: writes output and status, then closes politely."""

    sock: socket.socket
    rfile: BinaryIO
    want_stdout: bool = True
    want_stderr: bool = True
    sent: list[bytes] = field(default_factory=list)

    def send(self, channel: int, data: bytes) -> None:
        frame = encode_frame(bytes([channel]) + data)
        self.sock.sendall(frame)

    def finish(self, result: ExecResult, command: list[str]) -> None:
        out = result.stdout.encode() if isinstance(result.stdout, str) else result.stdout
        err = result.stderr.encode() if isinstance(result.stderr, str) else result.stderr
        if out and self.want_stdout:
            self.send(1, out)
        if err and self.want_stderr:
            self.send(2, err)
        self.send(3, status_json(result.exit_code, command))
        self.sock.sendall(encode_frame(struct.pack("!H", 1000), opcode=0x8))
        self._drain_until_close()

    def _drain_until_close(self) -> None:
        """Read client frames (close-channel signals, pings) until its close frame or EOF."""
        self.sock.settimeout(2.0)
        try:
            while True:
                frame = read_frame(self.rfile)
                if frame is None or frame[0] == 0x8:
                    return
                if frame[0] == 0x9:  # ping -> pong
                    self.sock.sendall(encode_frame(frame[1], opcode=0xA))
        except OSError:
            return
