"""The ``gateway`` command line: serve, check one call, verify an audit trail.

``gateway serve`` runs the HTTP service; ``gateway check`` takes one call through admission
and policy without running it; ``gateway audit verify PATH...`` exits 0 on an intact trail
and 1 naming the first bad record; ``gateway mcp`` serves the tools, and the configured
upstream MCP servers' tools, over MCP (stdio or HTTP). Every command has ``--help``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.metadata
import json
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path

from gateway import _json
from gateway._authorization import admitted_authorization
from gateway._call import ToolCall
from gateway._contract import decoding_of
from gateway._definition import ToolDefinition
from gateway._errors import GatewayError, InvalidInvocationError
from gateway._registry import Registry
from gateway.approvals._cli import add_approvals_command
from gateway.audit import (
    VerifyResult,
    check_anchors,
    head_path,
    read_anchors,
    trail_exists,
    trail_files,
    verify,
    verify_trail,
)
from gateway.obligations import describe
from gateway.policy import (
    GATE_PATH,
    CallerContext,
    EmbeddedEngine,
    OpaRestEngine,
    PolicyAuthorizer,
    PolicyError,
    caller_context,
    check_policy_coverage,
    read_bundle,
)
from gateway.replay._cli import add_replay_command
from gateway.server import (
    ConfigError,
    build_engine,
    build_service,
    expand,
    load_config,
    load_tools,
    named_asyncio,
    serve_workers,
    server_stack,
)
from gateway.service import ResultCode, configure_logging, result_code
from gateway.service._config import (
    GatewayConfig,
    audit_key_from_env,
    audit_key_from_file,
    check_listener,
)
from gateway.service._scaffold import WRITTEN, ScaffoldError, scaffold

#: What ``gateway --help`` says the command is (plain text, every subcommand named).
DESCRIPTION = (
    "A policy-as-code authorization gateway for tool calls: serve tools over HTTP (serve) or "
    "MCP (mcp) behind an OPA policy, decide one call without running it (check), check that "
    "the policy covers every tool (gate), verify an audit trail (audit verify), replay "
    "recorded decisions against a candidate policy (replay), decide calls that await a "
    "person's approval (approvals), and start a new gateway in a folder of its own (init)."
)


def _version() -> str:
    try:
        return importlib.metadata.version("gateway")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
#: Standard output was closed before everything was printed (as a shell reports SIGPIPE).
EXIT_BROKEN_PIPE = 128 + 13


_UNKEYED_WARNING = (
    "gateway audit verify: WARNING: no key: this checks that the chains are intact, which "
    "proves nothing against anyone who can write the trail (they can rewrite and rehash it). "
    "Verify with the key the service uses: --config, --key-env or --key-file."
)


def _verify_key(args: argparse.Namespace) -> tuple[bytes | None, Path | None]:
    # The key as the service takes it, and the trail the configuration names.
    if args.config:
        config = load_config(args.config)
        return config.audit.key, config.audit.path
    if args.key_env:
        return audit_key_from_env(args.key_env, where="--key-env"), None
    if args.key_file:
        return audit_key_from_file(Path(args.key_file), where="--key-file"), None
    return None, None


def _chains(
    args: argparse.Namespace, paths: list[Path], key: bytes | None
) -> list[tuple[Path, int, VerifyResult]]:
    # (what was verified, how many files, the result), one per chain.
    if args.exact or len(paths) > 1:
        head = None if args.no_head else head_path(paths[-1])
        return [(paths[-1], len(paths), verify(paths, key=key, head=head))]
    return [
        (chain, max(len(trail_files(chain)), 1), result)
        for chain, result in verify_trail(paths[0], key=key, head=not args.no_head)
    ]


def _verify(args: argparse.Namespace) -> int:
    try:
        key, configured = _verify_key(args)
    except ConfigError as exc:
        print(f"gateway audit verify: {exc}", file=sys.stderr)
        return EXIT_USAGE
    paths = [Path(p) for p in args.paths] or ([configured] if configured else [])
    if not paths:
        print("gateway audit verify: name the trail, or --config", file=sys.stderr)
        return EXIT_USAGE
    missing = [str(p) for p in paths if not p.exists() and not trail_exists(p)]
    if missing:
        print(f"gateway audit verify: no such file: {', '.join(missing)}", file=sys.stderr)
        return EXIT_USAGE
    try:
        chains = _chains(args, paths, key)
    except OSError as exc:  # a directory given with --exact, an unreadable file
        print(f"gateway audit verify: cannot read the trail: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if key is None:
        print(_UNKEYED_WARNING, file=sys.stderr)
    status = EXIT_OK
    for chain, files, result in chains:
        if not result.ok:
            print(f"FAILED: {result.error} (after {result.records} good records)", file=sys.stderr)
            status = EXIT_FAILED
            continue
        summary = (
            f"{chain}: {result.records} records in {files} file(s), last hash {result.last_hash}"
        )
        if not args.no_head and not head_path(chain).exists():
            # Without its head, records cut from the end at a line boundary leave a chain
            # that verifies: say the end was not checked rather than a plain ok.
            summary += f"; its end is unchecked: no head file {head_path(chain).name}"
        elif not args.no_head and result.head_seq is not None and result.head_seq < result.last_seq:
            # The head vouches for fewer records than the chain holds: those past it could
            # have been cut unseen (a batch not yet committed, a head copied from a chain
            # that had just begun).
            unchecked = result.last_seq - result.head_seq
            summary += f"; its last {unchecked} record(s) are past its head, unchecked"
        if key is None:
            print(f"UNKEYED, intact, proves nothing against a writer: {summary}")
        else:
            print(f"ok: {summary}")
    if args.anchors:
        return _verify_anchors(Path(args.anchors), key, [chain for chain, _, _ in chains], status)
    return status


def _verify_anchors(path: Path, key: bytes | None, chains: list[Path], status: int) -> int:
    if key is None:
        print("gateway audit verify: --anchors needs the audit key", file=sys.stderr)
        return EXIT_USAGE
    try:
        anchors, problems = read_anchors(path, key)
    except OSError as exc:
        print(f"gateway audit verify: cannot read {path}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE
    problems += check_anchors(anchors, chains)
    for problem in problems:
        print(f"FAILED: anchors: {problem}", file=sys.stderr)
    if problems:
        return EXIT_FAILED
    writers = len({anchor.writer for anchor in anchors})
    print(f"ok: {path}: {len(anchors)} anchors of {writers} writer(s), each in a chain given")
    return status


def _load_json(text: str, what: str) -> object:
    try:
        return _json.to_plain(_json.parse(text.encode("utf-8"), max_depth=64))
    except _json.StrictJSONError as exc:
        raise _UsageError(f"{what} is not valid JSON: {exc}") from None


class _UsageError(Exception):
    pass


def _refusal(code: ResultCode, message: str) -> dict[str, object]:
    # Every answer has the same members, so scripts can read any of them.
    return {
        "allow": False,
        "code": code.value,
        "message": message,
        "reasons": [],
        "decision_id": None,
    }


async def _decide(args: argparse.Namespace) -> tuple[int, dict[str, object]]:
    config = load_config(args.config)
    tools = Registry(*expand(load_tools(config)))
    binding = tools.resolve(args.tool)
    if binding is None:
        code = ResultCode.UNKNOWN_TOOL
        return code.exit_status, _refusal(code, f"unknown tool {args.tool!r}")
    try:
        invocation = binding.prepare(ToolCall("check", args.tool, args.arguments))
    except InvalidInvocationError as exc:
        code = ResultCode.INVALID_ARGUMENTS
        return code.exit_status, _refusal(code, str(exc))
    context = _load_json(args.context, "--context") if args.context else {}
    if not isinstance(context, dict):
        raise _UsageError("--context must be a JSON object")
    engine = build_engine(config)
    if isinstance(engine, OpaRestEngine):
        await engine.open()
    try:
        authorizer = PolicyAuthorizer(engine, path=config.engine.decision_path)
        with caller_context(CallerContext(context)):
            decision = await authorizer.authorize(
                admitted_authorization(binding.definition, decoding_of(invocation))
            )
    except PolicyError as exc:
        # The engine's own code is reported as it is; the table says how to exit on it.
        refusal = {**_refusal(result_code(exc.code), "no policy decision"), "code": exc.code}
        return result_code(exc.code).exit_status, {**refusal, "detail": exc.detail}
    finally:
        if isinstance(engine, OpaRestEngine):
            await engine.close()
    code = ResultCode.OK if decision.allowed else ResultCode.DENIED
    answer: dict[str, object] = {
        "allow": decision.allowed,
        "code": code.value,
        "message": decision.message,
        "reasons": list(decision.reasons),
        "decision_id": decision.decision_id,
        "revision": decision.revision,
        "cache_ttl": decision.cache_ttl,
    }
    if decision.obligations:
        # What the gateway would have to do for the call (contract version 2).
        answer["obligations"] = [describe(o) for o in decision.obligations]
    return code.exit_status, answer


def _check(args: argparse.Namespace) -> int:
    try:
        status, answer = asyncio.run(_decide(args))
    except (ConfigError, GatewayError, _UsageError) as exc:
        # GatewayError: a policy set that does not load, a context that is too large.
        detail = getattr(exc, "detail", None)
        print(f"gateway check: {exc}" + (f": {detail}" if detail else ""), file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(answer, indent=2))
    return status


def _warn_unkeyed(config: GatewayConfig, command: str) -> None:
    if config.audit.enabled and config.audit.key is None:
        print(
            f"gateway {command}: WARNING: audit.unkeyed: the audit chain has no key, so anyone "
            "who can write the trail can rewrite it undetected",
            file=sys.stderr,
        )


def _serve(args: argparse.Namespace) -> int:
    import uvicorn  # noqa: PLC0415 - only the serve command needs the server

    try:
        config = load_config(args.config)
        check_listener(config, args.host or config.server.host)
        _warn_unkeyed(config, "serve")
        if config.server.workers > 1:
            return _serve_workers(args, config)
    except (ConfigError, GatewayError) as exc:
        detail = getattr(exc, "detail", None)
        print(f"gateway serve: {exc}" + (f": {detail}" if detail else ""), file=sys.stderr)
        return EXIT_USAGE
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    # The port is taken before anything is built or said: one in use ends the command at
    # once, naming it, instead of after the policies were compiled and "serving" printed.
    try:
        listener = _listen(host, port)
    except OSError as exc:
        print(
            f"gateway serve: cannot listen on {host}:{port}: {exc.strerror or exc} "
            "(server.port or --port)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    with listener:
        try:
            level = args.log_level or config.log.level
            configure_logging(dataclasses.replace(config.log, level=level))
            service = build_service(config)
        except (ConfigError, GatewayError) as exc:
            # A policy that fails to load says why only in its detail (the engine's message).
            detail = getattr(exc, "detail", None)
            print(f"gateway serve: {exc}" + (f": {detail}" if detail else ""), file=sys.stderr)
            return EXIT_USAGE
        bound = listener.getsockname()[1]
        service.listening = f"http://{host}:{bound}"  # the start-up line, once it is open
        server = uvicorn.Server(
            uvicorn.Config(
                service.app,
                log_level=level,
                log_config=None,  # the gateway's own logging (configure_logging)
                access_log=False,
                **server_stack(),
            )
        )
        with named_asyncio():
            server.run(sockets=[listener])
    return EXIT_OK


def _listen(host: str, port: int) -> socket.socket:
    # The first address of host, as uvicorn would bind it (address reuse, not port sharing).
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=2048)


def _serve_workers(args: argparse.Namespace, config: GatewayConfig) -> int:
    # server.workers > 1: each worker assembles its own service (see gateway.server).
    host = args.host or config.server.host
    port = args.port if args.port is not None else config.server.port
    try:
        return serve_workers(config, host=host, port=port, log_level=args.log_level)
    except OSError as exc:
        print(f"gateway serve: cannot listen on {host}:{port}: {exc.strerror}", file=sys.stderr)
        return EXIT_USAGE


def _init(args: argparse.Namespace) -> int:
    try:
        made = scaffold(args.directory, tenant=args.tenant)
    except (ScaffoldError, OSError) as exc:
        print(f"gateway init: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(f"gateway init: wrote {', '.join(WRITTEN)} in {made.directory}", file=sys.stderr)
    print("The API key of the caller 'me' (shown once; gateway.toml keeps only its SHA-256):")
    print(f"  export GATEWAY_API_KEY={made.api_key}")
    print(f"Serve:  gateway serve --config {made.config}")
    print(
        'Call:   curl -s --json \'{"id":"1","name":"add","arguments":{"a":2,"b":3}}\' '
        '-H "X-API-Key: $GATEWAY_API_KEY" http://127.0.0.1:8080/v1/calls'
    )
    return EXIT_OK


def _mcp(args: argparse.Namespace) -> int:
    from gateway.mcp import run_mcp  # noqa: PLC0415 - only this command needs the MCP SDK

    try:
        config = load_config(args.config)
        if args.transport == "http":
            check_listener(config, args.host or config.server.host)
        _warn_unkeyed(config, "mcp")
        run_mcp(
            config,
            transport=args.transport,
            host=args.host,
            port=args.port,
            log_level=args.log_level,
        )
    except (ConfigError, GatewayError) as exc:
        print(f"gateway mcp: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


def _gate_engine(args: argparse.Namespace) -> tuple[list[ToolDefinition], EmbeddedEngine]:
    config = load_config(args.config)
    folder = Path(args.policies) if args.policies else config.engine.policies
    definitions = Registry(*expand(load_tools(config))).definitions()
    if folder is not None:
        if not folder.is_dir():
            raise _UsageError(f"{folder} is not a policy folder")
        engine = EmbeddedEngine.from_directory(
            folder, entrypoints=(GATE_PATH,), opa_binary=config.engine.opa_binary
        )
    elif config.engine.bundle is not None:
        engine = EmbeddedEngine(read_bundle(config.engine.bundle))
    else:
        raise _UsageError("the engine is an OPA server: name its policy folder with --policies")
    return definitions, engine


def _gate(args: argparse.Namespace) -> int:
    try:
        definitions, engine = _gate_engine(args)
        with engine:
            problems = check_policy_coverage(definitions, engine)
    except (ConfigError, _UsageError, GatewayError) as exc:
        print(f"gateway gate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for problem in problems:
        print(f"{problem.severity}: {problem.tool}: {problem.problem}")
    errors = sum(1 for problem in problems if problem.severity == "error")
    warnings = len(problems) - errors
    print(f"{len(definitions)} tools checked: {errors} error(s), {warnings} warning(s)")
    return EXIT_FAILED if errors else EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``gateway`` command."""
    parser = argparse.ArgumentParser(prog="gateway", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"gateway {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    audit = commands.add_parser("audit", help="work with audit trails")
    audit_commands = audit.add_subparsers(dest="audit_command", required=True)
    verify_parser = audit_commands.add_parser(
        "verify",
        help="verify a hash-chained audit trail",
        description="Exit 0 when every chain of the trail is intact; 1 naming the first bad "
        "record of each chain that is not. Without the key, an intact trail proves nothing "
        "against anyone who could write it.",
    )
    verify_parser.add_argument(
        "paths",
        nargs="*",
        help="the trail's file as configured (every writer's chain and its rotated segments "
        "are found beside it), a folder (every chain in it), or every file of one chain in "
        "order; default: audit.path of --config",
    )
    keys = verify_parser.add_mutually_exclusive_group()
    keys.add_argument(
        "--config", help="the service's TOML configuration: its audit key and audit.path"
    )
    keys.add_argument("--key-env", help="environment variable holding the trail's HMAC key")
    keys.add_argument("--key-file", help="file holding the trail's HMAC key")
    verify_parser.add_argument(
        "--exact", action="store_true", help="verify exactly the given files, in order"
    )
    verify_parser.add_argument(
        "--no-head", action="store_true", help="skip the truncation check against the head"
    )
    verify_parser.add_argument(
        "--anchors",
        metavar="FILE",
        help="an anchor log (audit.anchor_path): every writer's latest anchored record must "
        "be in one of the chains verified (a trail deleted, cut or rolled back fails)",
    )
    verify_parser.set_defaults(handler=_verify)

    check = commands.add_parser(
        "check",
        help="one call through admission and policy, without running the tool",
        description="Print the decision for one tool call as JSON; exit 0 if allowed, 1 if "
        "denied, 2 for an invalid call or no decision.",
    )
    check.add_argument("--config", required=True, help="the service's TOML configuration")
    check.add_argument("--tool", required=True, help="tool name")
    check.add_argument("--arguments", default="{}", help="the call's arguments (JSON text)")
    check.add_argument("--context", help='caller context (JSON object), e.g. {"subject": "alice"}')
    check.set_defaults(handler=_check)

    gate = commands.add_parser(
        "gate",
        help="check that every served tool can be decided by the policy",
        description="The policy gate: the policy's own gate rule (gateway/authz/gate/problems) "
        "over the served tools; exit 1 when a served tool would always be denied (no "
        "settings, no role, an argument the schema lacks); warnings do not fail. A policy "
        "folder is compiled with opa (engine.opa_binary, $OPA_BIN or PATH); a bundle must "
        "have the gate entrypoint.",
    )
    gate.add_argument("--config", required=True, help="the service's TOML configuration")
    gate.add_argument(
        "--policies", help="policy folder (default: engine.policies, else engine.bundle)"
    )
    gate.set_defaults(handler=_gate)

    serve = commands.add_parser(
        "serve", help="run the HTTP service", description="Serve the HTTP API from a TOML config."
    )
    serve.add_argument("--config", required=True, help="the service's TOML configuration")
    serve.add_argument("--host", help="listen address (default: server.host)")
    serve.add_argument("--port", type=int, help="listen port (default: server.port)")
    serve.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="overrides [log] level",
    )
    serve.set_defaults(handler=_serve)

    mcp = commands.add_parser(
        "mcp",
        help="serve the tools (and [[mcp.upstreams]] servers) over MCP, behind the policy",
        description="Serve MCP over stdio (caller context: mcp.stdio_context, for a local, "
        "trusted launcher) or streamable HTTP at /mcp (callers authenticate as in [auth]).",
    )
    mcp.add_argument("--config", required=True, help="the service's TOML configuration")
    mcp.add_argument("--transport", choices=["stdio", "http"], default="stdio")
    mcp.add_argument("--host", help="HTTP listen address (default: server.host)")
    mcp.add_argument("--port", type=int, help="HTTP listen port (default: server.port)")
    mcp.add_argument(
        "--log-level",
        default=None,
        choices=["debug", "info", "warning", "error"],
        help="overrides [log] level",
    )
    mcp.set_defaults(handler=_mcp)

    init = commands.add_parser(
        "init",
        help="write a working gateway into a new folder",
        description="Write a configuration, a tools module, the shipped policies and their "
        "compiled bundle into DIR (new or empty), with a fresh API key for one caller, printed "
        "once. Then: gateway serve --config DIR/gateway.toml",
    )
    init.add_argument("directory", metavar="DIR", help="the folder to create (or an empty one)")
    init.add_argument("--tenant", default="acme", help="the caller's tenant (default: acme)")
    init.set_defaults(handler=_init)

    add_replay_command(commands)
    add_approvals_command(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        status: int = args.handler(args)
        sys.stdout.flush()
    except BrokenPipeError:
        # The reader went away (``gateway check ... | head``): what was left to print has
        # no reader, which is not an error of the command. Python would report the pipe
        # again when it flushes stdout at exit, so stdout goes to the null device first.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return EXIT_BROKEN_PIPE
    return status


if __name__ == "__main__":
    sys.exit(main())
