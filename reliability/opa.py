"""A real OPA for the suite: the binary, the shipped policies, and the faulty policies.

OPA loads the shipped policy files (not their tests) and ``data.json`` from disk, so a
restart after SIGKILL comes back with the same policy. The policy faults replace the main
module over OPA's REST API (same module id) and restore its original text afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Final

from gateway.testing import OpaServer

ROOT: Final = Path(__file__).resolve().parent.parent
POLICIES: Final = ROOT / "policies"
PROVISION: Final = ROOT / "scripts" / "provision-opa"
DECISION_PATH: Final = "gateway/authz/decision"

#: The main module replaced by one whose two complete rules conflict: OPA answers HTTP 500.
CONFLICTING_POLICY: Final = (
    "package gateway.authz\n\n"
    'decision = {"allow": true} if input.tool.name != ""\n'
    'decision = {"allow": false} if input.tool.name != ""\n'
)
#: The main module replaced by one whose decision is undefined for every caller of the suite.
UNDEFINED_POLICY: Final = (
    'package gateway.authz\n\ndecision := {"allow": true} if input.context.subject == "nobody"\n'
)
#: The main module replaced by one whose ``allow`` is a string, not a boolean.
NON_BOOLEAN_POLICY: Final = 'package gateway.authz\n\ndecision := {"allow": "yes"}\n'


class OpaUnavailableError(RuntimeError):
    """No OPA binary could be found or provisioned (the suite never skips: it fails)."""


def opa_binary() -> str:
    """``$OPA_BIN``, else the path printed by ``scripts/provision-opa``.

    Raises:
        OpaUnavailableError: neither gives an executable.
    """
    given = os.environ.get("OPA_BIN")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise OpaUnavailableError(f"OPA_BIN={given!r} is not an executable file")
        return given
    try:
        done = subprocess.run(  # noqa: S603 - the project's own script, no shell
            [str(PROVISION)], capture_output=True, text=True, timeout=1800, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OpaUnavailableError(f"cannot run {PROVISION}: {exc}") from None
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines or not os.access(lines[-1], os.X_OK):
        raise OpaUnavailableError(
            f"{PROVISION} failed (exit {done.returncode}): {done.stderr[-2000:]}"
        )
    return lines[-1]


def opa_version(binary: str) -> str:
    """The first line of ``opa version``."""
    done = subprocess.run(  # noqa: S603 - the configured OPA binary, no shell
        [binary, "version"], capture_output=True, text=True, timeout=30, check=True
    )
    return done.stdout.splitlines()[0] if done.stdout else "unknown"


def policy_files() -> list[str]:
    """The shipped policy modules (not their tests) and data documents, absolute paths."""
    return sorted(
        str(path)
        for path in POLICIES.rglob("*")
        if (path.suffix == ".rego" and not path.name.endswith("_test.rego"))
        or path.name == "data.json"
    )


def start_opa(binary: str) -> OpaServer:
    """A real OPA on a free loopback port, serving the shipped policies."""
    return OpaServer(binary=binary, policy_paths=policy_files()).start()


def main_module(server: OpaServer) -> tuple[str, str]:
    """The id OPA gave the shipped main module, and its original text.

    Raises:
        RuntimeError: OPA does not list the main module.
    """
    listed = json.loads(server._request("GET", "/v1/policies"))  # noqa: SLF001 - the REST helper
    for policy in listed.get("result", []):
        if str(policy.get("id", "")).endswith("gateway/authz/main.rego"):
            return str(policy["id"]), str(policy["raw"])
    raise RuntimeError("OPA does not list the shipped main module gateway/authz/main.rego")


#: The main module replaced by one that denies every call: a revoked permission.
DENY_ALL_POLICY: Final = (
    'package gateway.authz\n\ndecision := {"allow": false, "message": "revoked for everyone"}\n'
)
