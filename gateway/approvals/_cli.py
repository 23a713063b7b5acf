"""``gateway approvals list|show|approve|reject``: an approver's commands, over the HTTP API.

The command talks to a running gateway (``--url``, default ``http://127.0.0.1:8080``) as
the approver whose API key is in the environment variable ``--key-env`` (default
``GATEWAY_API_KEY``; never on the command line, where other users of the host could read
it), so the same authentication, role checks and audit records apply as over HTTP. It
prints the API's JSON answer.

Exit status: 0 done, 1 refused (not found, not allowed, expired, already decided), 2 a
usage or connection error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Final

EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
DEFAULT_URL: Final = "http://127.0.0.1:8080"
DEFAULT_KEY_ENV: Final = "GATEWAY_API_KEY"
_SAFE_ID: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _request(url: str, key: str, method: str) -> tuple[int, Any]:
    request = urllib.request.Request(  # noqa: S310 - the scheme is checked by the caller
        url, method=method, headers={"X-API-Key": key, "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        body = error.read()
        try:
            return error.code, json.loads(body or b"null")
        except ValueError:
            return error.code, {"code": "http_error", "message": f"HTTP {error.code}"}


def _run(args: argparse.Namespace) -> int:
    key = os.environ.get(args.key_env, "")
    if not key:
        print(f"gateway approvals: set {args.key_env} to the approver's API key", file=sys.stderr)
        return EXIT_USAGE
    base = args.url.rstrip("/")
    if urllib.parse.urlsplit(base).scheme not in ("http", "https"):
        print("gateway approvals: --url must be http(s)://host:port", file=sys.stderr)
        return EXIT_USAGE
    if args.action == "list":
        path, method = "/v1/approvals", "GET"
    else:
        if not args.approval_id or not set(args.approval_id) <= _SAFE_ID:
            print("gateway approvals: name the approval by its id", file=sys.stderr)
            return EXIT_USAGE
        path = f"/v1/approvals/{args.approval_id}"
        method = "GET"
        if args.action in ("approve", "reject"):
            path, method = f"{path}/{args.action}", "POST"
    try:
        status, body = _request(base + path, key, method)
    except (OSError, ValueError) as exc:
        print(f"gateway approvals: cannot reach {base}: {type(exc).__name__}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(body, indent=2, sort_keys=True))
    if status == 200:
        return EXIT_OK
    return EXIT_REFUSED if status in (403, 404, 409) else EXIT_USAGE


def add_approvals_command(commands: Any) -> None:
    """Add ``gateway approvals`` to the ``gateway`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "approvals",
        help="list, show, approve or reject calls that await approval",
        description="An approver's commands, over a running gateway's HTTP API, as the "
        "approver whose API key is in --key-env. Exit 1 when the gateway refuses (not "
        "found, not allowed, expired, already decided), 2 for a usage or connection error.",
    )
    parser.add_argument("action", choices=["list", "show", "approve", "reject"], help="what to do")
    parser.add_argument("approval_id", nargs="?", help="the approval (not for list)")
    parser.add_argument("--url", default=DEFAULT_URL, help=f"the gateway (default {DEFAULT_URL})")
    parser.add_argument(
        "--key-env",
        default=DEFAULT_KEY_ENV,
        help=f"environment variable holding the approver's API key (default {DEFAULT_KEY_ENV})",
    )
    parser.set_defaults(handler=_run)
