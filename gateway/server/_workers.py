"""``gateway serve`` with several worker processes on one listening socket.

The parent binds the socket, starts ``server.workers`` processes (``spawn``: nothing of the
parent's threads or engine state is inherited) and hands each the socket; the kernel spreads
the connections over them. Each worker reads the configuration file again and assembles its
own service: its own engine instance, decision cache and audit chain. Two processes never
append to one chain: worker N (from 1) writes ``audit.path`` with ``.N`` before its suffix
(``audit.jsonl`` -> ``audit.1.jsonl``, its head file beside it), each chain verifiable on
its own (``gateway audit verify audit.1.jsonl``).

Several workers need what they share to live outside them (:func:`check_workers`): the
session and quota state in Redis, and no approval store. A worker that exits on its own
stops the whole service (the parent terminates the others
and exits non-zero): a supervisor (systemd, Kubernetes) restarts it whole, and no worker
runs with a chain the others would not know of. SIGTERM and SIGINT stop every worker
gracefully.
"""

from __future__ import annotations

import dataclasses
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
from pathlib import Path
from types import FrameType
from typing import Final

from gateway.service import ConfigError, GatewayConfig, named_asyncio, server_stack

_LOG: Final = logging.getLogger("gateway.server")
#: The exit status of a service whose worker failed.
EXIT_WORKER_FAILED: Final = 1
_STOP_TIMEOUT_S: Final = 30.0
_STOPPED: Final = frozenset({0, -signal.SIGTERM, -signal.SIGINT})


def worker_audit_path(path: Path, index: int) -> Path:
    """The audit chain of worker ``index`` (from 1): ``audit.jsonl`` -> ``audit.1.jsonl``."""
    return path.with_name(f"{path.stem}.{index}{path.suffix}")


def worker_config(config: GatewayConfig, index: int) -> GatewayConfig:
    """The configuration worker ``index`` serves: its own audit chain file."""
    audit = config.audit
    if audit.enabled and audit.path is not None:
        audit = dataclasses.replace(audit, path=worker_audit_path(audit.path, index))
    return dataclasses.replace(config, audit=audit)


def check_workers(config: GatewayConfig) -> None:
    """Refuse what several workers cannot share: state or approvals kept in one process.

    Session and quota state in memory would be counted by each worker on its own (a quota
    of N calls would allow N per worker), and the approval store is one file that one
    process owns.

    Raises:
        ConfigError: more than one worker with ``state.backend = "memory"`` or with
            ``[approvals]`` enabled.
    """
    if config.server.workers <= 1:
        return
    # A configuration without a [state] table keeps no session or quota state at all.
    state = getattr(config, "state", None)
    if state is not None and state.backend != "redis":
        raise ConfigError(
            'server.workers: more than one worker needs state.backend = "redis" (state in '
            "memory is each process's own, so every worker would count its own quotas)"
        )
    if config.approvals.enabled and config.approvals.backend != "redis":
        raise ConfigError(
            "server.workers: more than one worker cannot serve [approvals] from a file (its "
            'store is one process\'s): set approvals.backend = "redis"'
        )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def _worker(source: str, index: int, sock: socket.socket, log_level: str | None) -> None:
    # In the child: assemble this worker's own service and serve on the shared socket.
    import uvicorn  # noqa: PLC0415 - only a worker needs the server

    from gateway.server._http_service import build_service  # noqa: PLC0415 - in the child
    from gateway.service import ConfigError, load_config  # noqa: PLC0415 - in the child

    try:
        config = worker_config(load_config(source), index)
        service = build_service(config)
    except ConfigError as exc:
        print(f"gateway serve: worker {index}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_WORKER_FAILED) from None
    server = uvicorn.Server(
        uvicorn.Config(
            service.app,
            log_level=log_level,
            access_log=False,
            lifespan="on",
            **server_stack(),
        )
    )
    with named_asyncio():
        server.run(sockets=[sock])


def serve_workers(
    config: GatewayConfig, *, host: str, port: int, log_level: str | None = None
) -> int:
    """Serve ``config`` (read from ``config.source``) from ``config.server.workers`` processes.

    Returns the exit status: 0 after a SIGTERM or SIGINT stopped every worker, else
    :data:`EXIT_WORKER_FAILED` (a worker exited on its own).

    Raises:
        ConfigError: see :func:`check_workers`.
        ValueError: the configuration was not read from a file.
        OSError: the socket cannot be bound.
    """
    if config.source is None:
        raise ValueError("serving several workers needs the configuration's file")
    check_workers(config)
    count = config.server.workers
    sock = _bind(host, port)
    context = multiprocessing.get_context("spawn")
    workers = [
        context.Process(
            target=_worker,
            args=(str(config.source), index, sock, log_level),
            name=f"gateway-worker-{index}",
        )
        for index in range(1, count + 1)
    ]
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True
        for worker in workers:
            if worker.is_alive():
                worker.terminate()  # SIGTERM: uvicorn's graceful shutdown

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for worker in workers:
            worker.start()
        bound = sock.getsockname()
        print(f"gateway: {count} workers serving on http://{bound[0]}:{bound[1]}", file=sys.stderr)
        multiprocessing.connection.wait([worker.sentinel for worker in workers])
        failed = not stopping
        if failed:
            gone = [w.name for w in workers if w.exitcode is not None]
            print(f"gateway serve: {', '.join(gone)} exited; stopping", file=sys.stderr)
            stop(signal.SIGTERM, None)
        for worker in workers:
            worker.join(_STOP_TIMEOUT_S)
            if worker.is_alive():
                worker.kill()
                worker.join()
        # uvicorn raises the stopping signal again once shut down: -SIGTERM / -SIGINT.
        clean = all(worker.exitcode in _STOPPED for worker in workers)
        return 0 if not failed and clean else EXIT_WORKER_FAILED
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
