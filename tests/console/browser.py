"""The console's live setup for the browser tests and the screenshots.

A real service built from a TOML file (embedded engine compiled by the pinned opa, a keyed
file trail, file approvals, the console on), served by uvicorn on 127.0.0.1, and a Node.js
driver (driver.cjs) running Debian's Chromium through playwright-core. Chromium and
playwright-core come from $CHROMIUM_BIN and $PLAYWRIGHT_CORE (``make test`` sets both) or
from scripts/provision-chromium and scripts/provision-playwright; when neither gives them,
the caller fails, it never skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import httpx

from gateway.server import build_service, load_config
from gateway.testing import LiveServer
from tests.server.conftest import gateway_toml, toml_value

HERE: Final = Path(__file__).resolve().parent
REPO: Final = HERE.parent.parent
POLICY: Final = HERE / "policy"
DRIVER: Final = HERE / "driver.cjs"
CLERK: Final = "test-key-clerk"
TREASURER: Final = "test-key-tina"
AUDITOR: Final = "test-key-anna"
KEYS: Final = {
    CLERK: {"subject": "carl", "roles": ["clerk"], "tenant": "acme"},
    TREASURER: {"subject": "tina", "roles": ["treasurer"], "tenant": "acme"},
    AUDITOR: {"subject": "anna", "roles": ["auditor"], "tenant": "acme"},
}
#: A card number the audit trail masks: it must never appear in a page.
SENTINEL: Final = "4111111111111111"


class ProvisionError(RuntimeError):
    """The browser or its driver cannot be provided (the tests then fail)."""


def _provided(variable: str, script: str) -> str:
    given = os.environ.get(variable)
    if given:
        return given
    done = subprocess.run(
        [str(REPO / "scripts" / script)], capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0 or not done.stdout.strip():
        raise ProvisionError(f"scripts/{script} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def browser_tools() -> tuple[str, str]:
    """(Chromium, the playwright-core folder), provisioned.

    Raises:
        ProvisionError: either cannot be provided.
    """
    if shutil.which("node") is None:
        raise ProvisionError("node is not installed")
    return _provided("CHROMIUM_BIN", "provision-chromium"), _provided(
        "PLAYWRIGHT_CORE", "provision-playwright"
    )


def run_plan(origin: str, steps: list[dict[str, Any]], *, timeout: float = 180) -> dict[str, Any]:
    """Run the driver once (one browser launch) over ``steps``; what it saw."""
    chromium, playwright = browser_tools()
    env = {**os.environ, "CHROMIUM_BIN": chromium, "PLAYWRIGHT_CORE": playwright}
    done = subprocess.run(
        ["node", str(DRIVER)],
        input=json.dumps({"origin": origin, "steps": steps}),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the browser driver failed: {done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout)
    if result.get("failed"):
        last = result["results"][-1]
        raise RuntimeError(
            f"the browser driver failed at {result['failed']}; it was at {last.get('url')}: "
            f"{last.get('html', '')[-3000:]}"
        )
    return result


@dataclass
class Live:
    """A running gateway with the console on."""

    folder: Path
    server: LiveServer

    @property
    def url(self) -> str:
        return self.server.url

    def pay(self, reference: str, amount: float = 1200.0) -> httpx.Response:
        """The agent's payment call, as the clerk."""
        arguments = {
            "reference": reference,
            "to_account": "ACME-7",
            "amount": amount,
            "card_number": SENTINEL,
        }
        return httpx.post(
            self.url + "/v1/calls",
            json={"id": reference, "name": "pay", "arguments": arguments},
            headers={"X-API-Key": CLERK},
            timeout=10,
        )

    def lookup(self, account: str) -> httpx.Response:
        return httpx.post(
            self.url + "/v1/calls",
            json={"id": "l", "name": "lookup", "arguments": {"account": account}},
            headers={"X-API-Key": CLERK},
            timeout=10,
        )

    def stop(self) -> None:
        self.server.stop()


def start_live(folder: Path, opa_binary: str, *, extra: str = "") -> Live:
    """Build the service of a console configuration in ``folder`` and serve it."""
    text = gateway_toml(
        engine="embedded",
        audit_path=folder / "audit.jsonl",
        policies=POLICY,
        opa_binary=opa_binary,
        api_keys=KEYS,
        tools=["tests.console.console_tools:TOOLS"],
    )
    text += (
        f"\n[approvals]\nenabled = true\npath = {toml_value(folder / 'approvals.json')}\n"
        '\n[console]\nenabled = true\napprover_roles = ["treasurer"]\nauditors = ["anna"]\n' + extra
    )
    config = folder / "gateway.toml"
    config.write_text(text, encoding="utf-8")
    server = LiveServer(build_service(load_config(config)).app).start()
    return Live(folder, server)


def sign_in_steps(credential: str) -> list[dict[str, Any]]:
    """A fresh browser context signing in with ``credential`` through the form."""
    return [
        {"op": "context"},
        {"op": "goto", "path": "/console/login", "name": "login page"},
        {"op": "fill", "selector": "#credential", "value": credential},
        {"op": "click", "selector": "button[type=submit]", "name": "signed in"},
    ]
