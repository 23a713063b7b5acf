"""A transparent recorder in front of a real stdio MCP server: ``tap.py RECORD -- CMD ARGS...``.

Every line the client (the gateway) writes goes unchanged to the server and is appended to
RECORD (one JSON-RPC message a line); every byte the server writes goes unchanged back. The
tests read RECORD to prove which requests reached the real server, and which never did.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
from typing import IO


def _copy_out(source: IO[bytes], sink: IO[bytes]) -> None:
    while chunk := source.read1(65536):  # type: ignore[attr-defined]
        sink.write(chunk)
        sink.flush()


def main(argv: list[str]) -> int:
    record, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: tap.py RECORD -- COMMAND [ARGS...]")
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None
    assert child.stdout is not None
    out = threading.Thread(target=_copy_out, args=(child.stdout, sys.stdout.buffer), daemon=True)
    out.start()
    fd = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for line in sys.stdin.buffer:
            os.write(fd, line if line.endswith(b"\n") else line + b"\n")
            child.stdin.write(line)
            child.stdin.flush()
    except BrokenPipeError:
        pass
    finally:
        os.close(fd)
        with contextlib.suppress(BrokenPipeError):
            child.stdin.close()
    code = child.wait()
    out.join(timeout=5)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
