"""The README's runnable example: examples/quickstart.py, run as a user would run it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart.py"

EXPECTED_LINES = [
    "tools: add, read_file",
    "- alice adds: ran: 5",
    "- alice sends 1.0 as an integer: refused at admission: tool: invalid invocation: "
    "arguments: decode: /a: Input should be a valid integer (int_type)",
    "- alice sends an unknown member: refused at admission: tool: invalid invocation: "
    "arguments: (root): has a member the schema does not allow (additionalProperties)",
    "- alice reads her tenant's file: ran: contents of /srv/tenants/acme/report.txt",
    "- alice tries path traversal: denied by policy (rejected): path is not allowed: "
    "'.' and '..' segments are not allowed",
    "- alice reads another tenant: denied by policy (rejected): path is not allowed: "
    "it is outside the allowed directories",
    "- no caller context: denied by policy (rejected): caller identity is required",
    "decision cache: 0 hits, 5 misses, 5 entries",
]


def test_quickstart_runs_and_prints_the_documented_outcomes() -> None:
    result = subprocess.run(
        [sys.executable, str(QUICKSTART)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )

    assert (result.returncode, result.stderr) == (0, "")
    header, *lines = result.stdout.splitlines()
    assert re.fullmatch(r"bundle policies.tar.gz revision sha256:[0-9a-f]+ on embedded:.+", header)
    assert lines == EXPECTED_LINES
