"""Screenshots of every console view, from a live demo gateway: ``make console-screenshots``.

Serves the console tests' configuration (with a shadow candidate that also refuses lookups
of ACME-9) on 127.0.0.1, makes a few calls as an agent would, and lets Debian's Chromium
(playwright-core) sign in and photograph each view into docs/console/.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.console.browser import (
    AUDITOR,
    HERE,
    REPO,
    TREASURER,
    browser_tools,
    run_plan,
    sign_in_steps,
    start_live,
)
from tests.server.conftest import toml_value


def _opa() -> str:
    import subprocess

    done = subprocess.run(
        [str(REPO / "scripts" / "provision-opa")], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "console")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    browser_tools()
    opa = _opa()
    with tempfile.TemporaryDirectory(prefix="console-demo-") as tmp:
        folder = Path(tmp)
        shadow = (
            f"\n[shadow]\nenabled = true\npolicies = {toml_value(HERE / 'candidate')}\n"
            f"opa_binary = {toml_value(opa)}\n"
        )
        live = start_live(folder, opa, extra=shadow)
        try:
            for account in ("ACME-7", "ACME-9", "closed", "ACME-9", "ACME-3"):
                live.lookup(account)
            first = live.pay("INV-2231", 1200.0).json()["approval_id"]
            live.pay("INV-2232", 86.5)
            decision = _first_decision(folder)
            steps: list[dict[str, Any]] = [
                {"op": "context"},
                {"op": "goto", "path": "/console/login"},
                {"op": "screenshot", "file": str(out / "login.png")},
                *sign_in_steps(TREASURER),
                {"op": "goto", "path": "/console/approvals"},
                {"op": "screenshot", "file": str(out / "approvals.png")},
                {"op": "goto", "path": f"/console/approvals/{first}"},
                {
                    "op": "fill",
                    "selector": "#comment",
                    "value": "Invoice 2231 matches order PO-778",
                },
                {"op": "screenshot", "file": str(out / "approval.png")},
                *sign_in_steps(AUDITOR),
                {"op": "goto", "path": "/console/decisions"},
                {"op": "screenshot", "file": str(out / "decisions.png")},
                {"op": "goto", "path": f"/console/decisions/{decision}"},
                {"op": "screenshot", "file": str(out / "decision.png")},
                {"op": "goto", "path": "/console/replay"},
                {"op": "screenshot", "file": str(out / "replay.png")},
            ]
            run_plan(live.url, steps)
        finally:
            live.stop()
    for name in sorted(out.glob("*.png")):
        print(name.relative_to(REPO))
    return 0


def _first_decision(folder: Path) -> str:
    import json

    for line in (folder / "audit.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "decision" and record.get("tool") == "pay":
            return str(record["decision_id"])
    raise RuntimeError("the demo wrote no payment decision")


if __name__ == "__main__":
    sys.exit(main())
