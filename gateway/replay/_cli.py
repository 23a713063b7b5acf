"""``gateway replay``: a trail's recorded decisions against a candidate policy, as a flip report.

Exit status: 0 when no ``--fail-on`` condition holds, 1 when one does, 2 for a usage
error (no trail, a key ring that does not load, a candidate that does not load).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gateway import GatewayError
from gateway.policy import (
    DEFAULT_DECISION_PATH,
    EmbeddedEngine,
    OpaRestEngine,
    PolicyEngine,
    normalize_path,
)
from gateway.replay._keys import KeyRing, KeyRingError, new_key_entry
from gateway.replay._replay import (
    DEFAULT_CONCURRENCY,
    DEFAULT_EXAMPLES,
    DEFAULT_FAIL_ON,
    FAIL_ON_TOKENS,
    ReplayReport,
    parse_fail_on,
    replay,
)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class _UsageError(Exception):
    pass


def _keyring(args: argparse.Namespace) -> KeyRing | None:
    if args.key_env:
        return KeyRing.from_env(args.key_env)
    if args.key_file:
        return KeyRing.from_file(args.key_file)
    return None


def _candidate(args: argparse.Namespace, path: str) -> PolicyEngine:
    chosen = [name for name in ("policies", "bundle", "opa") if getattr(args, name)]
    if len(chosen) != 1:
        raise _UsageError("name exactly one candidate: --policies DIR, --bundle FILE or --opa URL")
    if args.opa:
        try:
            return OpaRestEngine(args.opa, timeout=args.timeout, revision_interval=0)
        except ValueError as exc:
            raise _UsageError(str(exc)) from None
    options: dict[str, Any] = {"timeout_s": args.timeout}
    if args.policies:
        return EmbeddedEngine.from_directory(
            args.policies, entrypoints=(path,), opa_binary=args.opa_binary, **options
        )
    return EmbeddedEngine.from_bundle(Path(args.bundle), **options)


@dataclass(frozen=True, slots=True)
class _Plan:
    path: str
    trail: Path
    capture: Path | None
    keyring: KeyRing | None
    fail_on: frozenset[str]


def _plan(args: argparse.Namespace) -> _Plan:
    if not args.trail:
        raise _UsageError("name the trail with --trail")
    try:
        fail_on = parse_fail_on(args.fail_on)
        path = normalize_path(args.decision_path)
    except ValueError as exc:
        raise _UsageError(str(exc)) from None
    trail = Path(args.trail)
    if not trail.exists():
        raise _UsageError(f"no such trail: {trail}")
    capture = Path(args.capture) if args.capture else None
    if capture is not None and not capture.is_dir():
        raise _UsageError(f"no such capture folder: {capture}")
    return _Plan(path, trail, capture, _keyring(args), fail_on)


async def _run(args: argparse.Namespace, plan: _Plan) -> tuple[int, str]:
    engine = _candidate(args, plan.path)
    if isinstance(engine, OpaRestEngine):
        await engine.open()
    try:
        # A candidate that is down would read as every decision flipping to an error.
        if isinstance(engine, OpaRestEngine) and not await engine.healthy():
            raise _UsageError(f"the candidate OPA at {args.opa} is not healthy (GET /health)")
        if isinstance(engine, EmbeddedEngine) and plan.path not in engine.entrypoints:
            raise _UsageError(f"the candidate cannot answer {plan.path} (not an entrypoint)")
        report = ReplayReport(
            examples_wanted=args.examples, list_all_unreplayed=args.list_unreplayed
        )
        try:
            await replay(
                plan.trail,
                engine,
                path=plan.path,
                capture=plan.capture,
                keyring=plan.keyring,
                report=report,
                concurrency=args.concurrency,
            )
        except OSError as exc:
            raise _UsageError(
                f"cannot read the trail or the capture: {exc.strerror or exc}"
            ) from None
    finally:
        if isinstance(engine, OpaRestEngine):
            await engine.close()
        elif isinstance(engine, EmbeddedEngine):
            engine.close()
    fail_on = plan.fail_on
    if args.json:
        document = report.as_dict(fail_on=fail_on, show_text=args.show_text)
        text = json.dumps(document, indent=2, ensure_ascii=False) + "\n"
    else:
        text = report.to_text(fail_on=fail_on, show_text=args.show_text)
    return (EXIT_FAILED if report.failures(fail_on) else EXIT_OK), text


def run(args: argparse.Namespace) -> int:
    """The ``gateway replay`` command."""
    if args.new_key:
        try:
            print(new_key_entry(args.new_key))
        except KeyRingError as exc:
            print(f"gateway replay: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    try:
        status, text = asyncio.run(_run(args, _plan(args)))
    except (_UsageError, GatewayError) as exc:
        # GatewayError: a key ring or a candidate that does not load (named, never quoted).
        detail = getattr(exc, "detail", None)
        print(f"gateway replay: {exc}" + (f": {detail}" if detail else ""), file=sys.stderr)
        return EXIT_USAGE
    sys.stdout.write(text)
    return status


def add_replay_command(commands: Any) -> None:
    """Add ``gateway replay`` to the ``gateway`` command's subparsers."""
    parser: argparse.ArgumentParser = commands.add_parser(
        "replay",
        help="replay recorded decisions against a candidate policy (a flip report)",
        description="Re-evaluate the decisions of an audit trail against a candidate policy "
        "(a policy folder, a bundle, or a live OPA server) and report what would change: "
        "counts per change, tool and caller role, and the first examples by decision id. "
        "The inputs come from the encrypted replay capture; decisions without one are "
        "reported as not replayed, with the reason. Exit 1 when a --fail-on condition "
        "holds, 2 for a usage error.",
    )
    parser.add_argument("--trail", help="the audit trail: its folder, or its file as configured")
    parser.add_argument("--capture", help="the replay capture folder (replay.capture_dir)")
    keys = parser.add_mutually_exclusive_group()
    keys.add_argument("--key-env", help="environment variable holding the replay key ring")
    keys.add_argument("--key-file", help="file (mode 0600) holding the replay key ring")
    parser.add_argument("--policies", help="candidate: a Rego policy folder (compiled with opa)")
    parser.add_argument("--bundle", help="candidate: an OPA bundle (.tar.gz or folder)")
    parser.add_argument("--opa", help="candidate: a live OPA server, http(s)://host:port")
    parser.add_argument(
        "--decision-path",
        default=DEFAULT_DECISION_PATH,
        help=f"the candidate's decision path (default {DEFAULT_DECISION_PATH})",
    )
    parser.add_argument("--opa-binary", help="the opa that compiles --policies (default $OPA_BIN)")
    parser.add_argument(
        "--timeout", type=float, default=5.0, help="deadline of one candidate evaluation (s)"
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help="evaluations in flight at once against --opa",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable report")
    parser.add_argument(
        "--examples", type=int, default=DEFAULT_EXAMPLES, help="how many examples to show"
    )
    parser.add_argument(
        "--list-unreplayed",
        action="store_true",
        help="list every decision that could not be replayed, not only the first --examples",
    )
    parser.add_argument(
        "--show-text",
        action="store_true",
        help="show messages and reasons in examples (they may quote argument values)",
    )
    parser.add_argument(
        "--fail-on",
        default=",".join(sorted(DEFAULT_FAIL_ON)),
        help="exit 1 when any of these occur (comma-separated, or none): "
        + ", ".join(FAIL_ON_TOKENS)
        + f" (default {','.join(sorted(DEFAULT_FAIL_ON))})",
    )
    parser.add_argument(
        "--new-key",
        metavar="KEY_ID",
        help="print a fresh KEY_ID:BASE64 key ring entry and exit",
    )
    parser.set_defaults(handler=run)
