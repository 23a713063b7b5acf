"""The ``gateway`` command line: offline checks and audit verification.

``gateway audit verify PATH...`` exits 0 on an intact trail and 1 naming the first bad
record; ``gateway check`` evaluates one call against a policy directory and prints the
decision. Every command has ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway import _json
from gateway._authorization import Authorization
from gateway._definition import ToolDefinition
from gateway._errors import GatewayError
from gateway.audit import head_path, trail_files, verify
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    CallerContext,
    EmbeddedEngine,
    PolicyAuthorizer,
    PolicyError,
    caller_context,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _verify(args: argparse.Namespace) -> int:
    key = Path(args.key_file).read_bytes().strip() if args.key_file else None
    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        print(f"gateway audit verify: no such file: {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    files = trail_files(paths[0]) if len(paths) == 1 and not args.exact else paths
    head = head_path(files[-1]) if files else None
    result = verify(files, key=key, head=None if args.no_head else head)
    if result.ok:
        print(f"ok: {result.records} records in {len(files)} file(s), last hash {result.last_hash}")
        return EXIT_OK
    print(f"FAILED: {result.error} (after {result.records} good records)", file=sys.stderr)
    return EXIT_FAILED


def _load_json(text: str, what: str) -> object:
    try:
        return _json.to_plain(_json.parse(text.encode("utf-8"), max_depth=64))
    except _json.StrictJSONError as exc:
        raise SystemExit(f"gateway check: {what} is not valid JSON: {exc}") from None


def _check(args: argparse.Namespace) -> int:
    schema = _load_json(args.schema, "--schema") if args.schema else {"type": "object"}
    context = _load_json(args.context, "--context") if args.context else {}
    if not isinstance(context, dict):
        raise SystemExit("gateway check: --context must be a JSON object")
    arguments = args.arguments.encode("utf-8")
    try:
        _json.parse(arguments, max_depth=64)
        definition = ToolDefinition(args.tool, schema, args.description or "")
        engine = EmbeddedEngine.from_directory(args.policies, warm_up_path=args.path)
        authorizer = PolicyAuthorizer(engine, path=args.path)
    except (GatewayError, _json.StrictJSONError, ValueError) as exc:
        print(f"gateway check: {exc}", file=sys.stderr)
        return EXIT_USAGE

    async def decide() -> dict[str, object]:
        with caller_context(CallerContext(context)):
            decision = await authorizer.authorize(Authorization(definition, arguments))
        return {
            "allow": decision.allowed,
            "message": decision.message,
            "reasons": list(decision.reasons),
            "cache_ttl": decision.cache_ttl,
            "revision": decision.revision,
        }

    try:
        answer = asyncio.run(decide())
    except PolicyError as exc:
        print(json.dumps({"allow": False, "error": exc.code, "detail": exc.detail}))
        return EXIT_FAILED
    print(json.dumps(answer, indent=2))
    return EXIT_OK if answer["allow"] else EXIT_FAILED


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gateway`` command."""
    parser = argparse.ArgumentParser(prog="gateway", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)

    audit = commands.add_parser("audit", help="work with audit trails")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    verify_parser = audit_commands.add_parser(
        "verify",
        help="verify a hash-chained audit trail",
        description="Exit 0 on an intact trail; 1 naming the first bad record.",
    )
    verify_parser.add_argument(
        "paths",
        nargs="+",
        help="the active file (its rotated segments are found beside it), or every file "
        "of the trail in order",
    )
    verify_parser.add_argument("--key-file", help="file holding the trail's HMAC key")
    verify_parser.add_argument(
        "--exact", action="store_true", help="verify exactly the given files, in order"
    )
    verify_parser.add_argument(
        "--no-head", action="store_true", help="skip the truncation check against the head"
    )
    verify_parser.set_defaults(handler=_verify)

    check = commands.add_parser(
        "check",
        help="evaluate one call against a policy directory (embedded engine)",
        description="Print the decision for one tool call; exit 0 if allowed, 1 if not.",
    )
    check.add_argument("--policies", required=True, help="policy directory (*.rego, data.json)")
    check.add_argument("--tool", required=True, help="tool name")
    check.add_argument("--arguments", default="{}", help="the call's arguments (JSON object)")
    check.add_argument("--context", help="caller context (JSON object)")
    check.add_argument("--schema", help="the tool's input schema (JSON object)")
    check.add_argument("--description", help="the tool's description")
    check.add_argument("--path", default=DEFAULT_DECISION_PATH, help="decision path")
    check.set_defaults(handler=_check)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    status: int = args.handler(args)
    return status


if __name__ == "__main__":
    sys.exit(main())
