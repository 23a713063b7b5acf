"""``gateway init DIR``: a working gateway in a folder of its own, from the installed package.

The folder gets a configuration (``gateway.toml``), a tools module (``tools.py``), a copy of
the shipped policies (``policies/``, their sources, to read and change) and of the bundle
they compile to (``policies.tar.gz``, what the embedded engine serves, so no opa binary is
needed), and a fresh API key for one caller, whose SHA-256 alone is written down: the key
itself is returned once, to be shown once. Every path in the configuration is relative to
the configuration's own folder, so the folder works wherever it is moved.

The shipped files come with the package (a wheel carries them under ``gateway/_shipped``);
in a source checkout they are the repository's own ``policies/`` and
``bundles/policies.tar.gz``.
"""

from __future__ import annotations

import hashlib
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent.parent
_SHIPPED = _PACKAGE / "_shipped"
_CHECKOUT = _PACKAGE.parent

#: The files ``gateway init`` writes into its folder, in order.
WRITTEN = ("gateway.toml", "tools.py", "policies", "policies.tar.gz")


class ScaffoldError(Exception):
    """The folder cannot be set up (it is not empty, or the shipped files are missing)."""


@dataclass(frozen=True, slots=True)
class Scaffold:
    """What ``scaffold`` made: the folder, its configuration and the caller's API key."""

    directory: Path
    config: Path
    api_key: str


def shipped_policies() -> Path:
    """The shipped policy sources (``policies/``), from the package or the checkout."""
    return _shipped("policies", _CHECKOUT / "policies")


def shipped_bundle() -> Path:
    """The shipped compiled bundle (``policies.tar.gz``), from the package or the checkout."""
    return _shipped("policies.tar.gz", _CHECKOUT / "bundles" / "policies.tar.gz")


def _shipped(name: str, in_checkout: Path) -> Path:
    for candidate in (_SHIPPED / name, in_checkout):
        if candidate.exists():
            return candidate
    raise ScaffoldError(f"the package has no shipped {name}: reinstall the gateway")


def scaffold(directory: str | Path, *, tenant: str = "acme") -> Scaffold:
    """Write a working gateway into ``directory`` (created; it must be empty if it exists).

    Raises:
        ScaffoldError: ``directory`` is not an empty folder, or a shipped file is missing.
    """
    folder = Path(directory)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ScaffoldError(f"{folder} exists and is not an empty folder: nothing was written")
    policies, bundle = shipped_policies(), shipped_bundle()
    folder.mkdir(parents=True, exist_ok=True)
    api_key = "gw-" + secrets.token_urlsafe(32)
    digest = hashlib.sha256(api_key.encode("utf-8")).hexdigest()
    config = folder / "gateway.toml"
    config.write_text(_CONFIG.format(sha256=digest, tenant=tenant), encoding="utf-8")
    (folder / "tools.py").write_text(_TOOLS, encoding="utf-8")
    shutil.copytree(
        policies, folder / "policies", ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
    )
    shutil.copyfile(bundle, folder / "policies.tar.gz")
    return Scaffold(directory=folder, config=config, api_key=api_key)


_CONFIG = """\
# A gateway made by `gateway init`. Paths are relative to this file's folder.
# Serve it:   gateway serve --config gateway.toml
# Reference:  every key is described in the gateway's docs/configuration.md.

[engine]
kind = "embedded"                 # OPA's compiled policy, in process: no OPA server
bundle = "policies.tar.gz"        # the shipped policies, compiled: no opa binary needed
# policies = "policies"           # instead: compile policies/ at start (needs opa on PATH)
timeout_s = 1.0

[cache]
enabled = true
max_ttl_s = 30                    # no decision is reused longer than this

[audit]
enabled = true
path = "audit/audit.jsonl"
fsync = "always"
key_file = "audit.key"            # the chain's HMAC key; keep it apart from the trail in
generate_key = true               # production (here it is made on first start)

[server]
host = "127.0.0.1"
port = 8080

# One caller, with the key `gateway init` printed once (only its SHA-256 is kept here).
[[auth.api_keys]]
sha256 = "{sha256}"
context = {{ subject = "me", roles = ["reader"], tenant = "{tenant}" }}

[tools]
modules = ["tools:TOOLS"]         # this file's folder is importable
"""

_TOOLS = '''\
"""The tools this gateway serves. Each needs a policy: see policies/README.md, "Adding a tool".

The shipped policies grant `add` to the `reader` role; a tool they do not configure is
refused until policies/data.json configures it (default deny).
"""

from __future__ import annotations

from gateway import function_tool


@function_tool
def add(a: int, b: int) -> str:
    """Add two integers."""
    return str(a + b)


TOOLS = [add]
'''
