"""Start, control and talk to a real OPA server (local process or Docker container) in tests."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, NoReturn, Self

from gateway.testing._serving import free_port

if TYPE_CHECKING:
    from testcontainers.core.container import (  # type: ignore[import-not-found,unused-ignore]
        DockerContainer,
    )

__all__ = ["OPA_IMAGE", "OPA_VERSION", "OpaContainer", "OpaServer", "find_opa_binary"]

#: OPA version the project is pinned to; keep in sync with ``OPA_VERSION`` in
#: ``scripts/provision-opa`` (a test checks that the two agree).
OPA_VERSION = "1.22.3"

#: Docker image used by :class:`OpaContainer`.
OPA_IMAGE = f"openpolicyagent/opa:{OPA_VERSION}"

_HOST = "127.0.0.1"
_CONTAINER_PORT = 8181
_START_ATTEMPTS = 3
_POLL_INTERVAL = 0.02
_HEALTH_TIMEOUT = 0.5
_STOP_TIMEOUT = 5.0
_DEFAULT_HTTP_TIMEOUT = 5.0
_TAIL_BYTES = 4000
_ADDR_IN_USE = "address already in use"

# Flags passed before ``extra_args`` (later flags win, so callers can override them).
_DEFAULT_FLAGS = ("--skip-version-check", "--log-level=error")


def find_opa_binary() -> str:
    """Locate the ``opa`` binary to run.

    Returns:
        ``$OPA_BIN`` if set, else the ``opa`` found on ``PATH``.

    Raises:
        LookupError: If neither is available.
    """
    env = os.environ.get("OPA_BIN")
    if env:
        return env
    found = shutil.which("opa")
    if found:
        return found
    msg = (
        "no OPA binary found: set OPA_BIN to an opa executable, or run scripts/provision-opa "
        "(which prints the path of a pinned opa, building it with Go if needed) and export "
        'OPA_BIN="$(scripts/provision-opa)"'
    )
    raise LookupError(msg)


def _api_path(prefix: str, path: str) -> str:
    """Join an API prefix and a slash-separated document path, URL-quoting each segment."""
    cleaned = path.strip("/")
    if not cleaned:
        return prefix
    return f"{prefix}/{urllib.parse.quote(cleaned, safe='/')}"


def _health_ok(base_url: str) -> bool:
    """Return True if ``GET /health`` answers 200 right now."""
    try:
        with urllib.request.urlopen(  # noqa: S310 - URL is always http://host:port
            f"{base_url}/health", timeout=_HEALTH_TIMEOUT
        ) as resp:
            return bool(resp.status == 200)
    except urllib.error.HTTPError as err:
        err.close()
        return False
    except OSError:
        return False


class _OpaRestMixin:
    """Small REST helpers shared by :class:`OpaServer` and :class:`OpaContainer`."""

    @property
    def url(self) -> str:
        raise NotImplementedError

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        content_type: str = "application/json",
        timeout: float = _DEFAULT_HTTP_TIMEOUT,
    ) -> bytes:
        """Send one request to OPA and return the response body.

        Raises:
            RuntimeError: If OPA answers with a non-2xx status.
        """
        req = urllib.request.Request(f"{self.url}{path}", data=body, method=method)  # noqa: S310
        if body is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310
                data: bytes = resp.read()
                return data
        except urllib.error.HTTPError as err:
            with err:
                detail = err.read().decode("utf-8", "replace")
            msg = f"OPA {method} {path} failed with HTTP {err.code}: {detail}"
            raise RuntimeError(msg) from None

    def put_policy(
        self, policy_id: str, rego_text: str, *, timeout: float = _DEFAULT_HTTP_TIMEOUT
    ) -> None:
        """Create or replace a policy module through ``PUT /v1/policies/<id>``.

        Args:
            policy_id: Policy identifier (may contain ``/``).
            rego_text: Rego source of the module.
            timeout: Socket timeout in seconds (OPA recompiles every module under load).

        Raises:
            RuntimeError: If OPA rejects the policy (the body holds the compile errors).
        """
        self._request(
            "PUT",
            _api_path("/v1/policies", policy_id),
            body=rego_text.encode(),
            content_type="text/plain",
            timeout=timeout,
        )

    def put_data(self, path: str, value: object) -> None:
        """Create or replace a base document through ``PUT /v1/data/<path>``.

        Args:
            path: Slash-separated document path; ``""`` replaces the whole data root.
            value: JSON-serialisable value to store.

        Raises:
            RuntimeError: If OPA answers with a non-2xx status.
        """
        self._request("PUT", _api_path("/v1/data", path), body=json.dumps(value).encode())

    def patch_data(self, path: str, operations: Sequence[Mapping[str, object]]) -> None:
        """Apply JSON Patch operations to a base document through ``PATCH /v1/data/<path>``.

        Raises:
            RuntimeError: If OPA answers with a non-2xx status.
        """
        self._request(
            "PATCH",
            _api_path("/v1/data", path),
            body=json.dumps(list(operations)).encode(),
            content_type="application/json-patch+json",
        )

    def delete_data(self, path: str) -> None:
        """Remove a base document through ``DELETE /v1/data/<path>``.

        Raises:
            RuntimeError: If OPA answers with a non-2xx status.
        """
        self._request("DELETE", _api_path("/v1/data", path))

    def query(
        self,
        path: str,
        input: object,
        *,
        params: Mapping[str, str] | None = None,
        timeout: float = _DEFAULT_HTTP_TIMEOUT,
    ) -> dict[str, Any]:
        """Evaluate a document through ``POST /v1/data/<path>``.

        Args:
            path: Slash-separated document path, e.g. ``"gateway/authz/allow"``.
            input: Value sent as ``{"input": ...}``.
            params: Optional query parameters (e.g. ``{"metrics": "true"}``).
            timeout: Socket timeout in seconds.

        Returns:
            The parsed response body; it has no ``result`` key when the document is undefined.

        Raises:
            RuntimeError: If OPA answers with a non-2xx status.
            TimeoutError: If OPA does not answer within ``timeout``.
        """
        target = _api_path("/v1/data", path)
        if params:
            target = f"{target}?{urllib.parse.urlencode(dict(params))}"
        raw = self._request(
            "POST", target, body=json.dumps({"input": input}).encode(), timeout=timeout
        )
        parsed: dict[str, Any] = json.loads(raw)
        return parsed


class OpaServer(_OpaRestMixin):
    """A real ``opa run --server`` process listening on a free port of 127.0.0.1.

    Output of OPA (stdout and stderr) goes to a log file in a private temporary directory,
    see :attr:`log_path` and :meth:`read_log`.

    Example:
        >>> with OpaServer(binary=find_opa_binary(), policy_paths=["policy/"]) as opa:
        ...     opa.query("gateway/authz/allow", {"user": "alice"})
    """

    def __init__(
        self,
        *,
        binary: str | os.PathLike[str],
        policy_paths: Sequence[str | os.PathLike[str]] = (),
        data: Mapping[str, object] | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 20.0,
    ) -> None:
        self._binary = os.fspath(binary)
        # Absolute: OPA runs in its own working directory.
        self._policy_paths = [os.path.abspath(p) for p in policy_paths]
        self._data = dict(data) if data is not None else None
        self._extra_args = list(extra_args)
        self._ready_timeout = ready_timeout
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._log_file: IO[bytes] | None = None
        self._log_offset = 0

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> Self:
        """Launch OPA on a fresh free port and wait until ``GET /health`` answers 200.

        Returns:
            This server, for chaining.

        Raises:
            RuntimeError: If OPA is already running, exits early or is not healthy within
                ``ready_timeout``; the message includes the tail of OPA's output.
        """
        self._ensure_not_running()
        for attempt in range(1, _START_ATTEMPTS + 1):
            port = free_port(_HOST)
            try:
                self._launch(port)
            except _PortInUseError:
                if attempt == _START_ATTEMPTS:
                    raise
            else:
                return self
        raise AssertionError("unreachable")  # pragma: no cover

    def restart(self) -> Self:
        """Start OPA again on the same port, after :meth:`kill` or :meth:`stop`.

        A running process is stopped first.

        Returns:
            This server, for chaining.

        Raises:
            RuntimeError: If the server was never started, or OPA cannot become healthy
                on its previous port.
        """
        if self._port is None:
            msg = "OpaServer.restart() called before start()"
            raise RuntimeError(msg)
        self.stop()
        self._launch(self._port)
        return self

    def stop(self) -> None:
        """Terminate OPA gracefully (SIGTERM), killing it if it does not exit in time.

        Safe to call any number of times, and on a paused process.
        """
        proc = self._process
        if proc is not None and proc.poll() is None:
            proc.terminate()
            # A stopped (SIGSTOP) process only handles SIGTERM once continued.
            self._signal(proc, signal.SIGCONT)
            try:
                proc.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_log()

    def kill(self) -> None:
        """Kill OPA with SIGKILL (no graceful shutdown) and reap it."""
        proc = self._process
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._close_log()

    def pause(self, *, settle: float = 5.0) -> None:
        """Freeze OPA with SIGSTOP; connections are still accepted but never answered.

        ``kill(SIGSTOP)`` returns before the signal lands, so on Linux this waits until the
        kernel reports every OPA thread stopped (at most ``settle`` seconds).

        Raises:
            RuntimeError: If OPA is not running, or did not stop within ``settle``.
        """
        process = self._require_running()
        self._signal(process, signal.SIGSTOP)
        tasks = Path(f"/proc/{process.pid}/task")
        if not tasks.is_dir():  # pragma: no cover - not Linux: nothing to wait on
            return
        deadline = time.monotonic() + settle
        while not _all_stopped(tasks):
            if time.monotonic() > deadline:
                raise RuntimeError(f"OPA (pid {process.pid}) did not stop after SIGSTOP")
            time.sleep(0.001)

    def resume(self) -> None:
        """Continue a paused OPA with SIGCONT.

        Raises:
            RuntimeError: If OPA is not running.
        """
        self._signal(self._require_running(), signal.SIGCONT)

    def close(self) -> None:
        """Stop OPA and delete the temporary directory (data file and logs)."""
        self.stop()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- properties ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the server, e.g. ``http://127.0.0.1:12345``."""
        return f"http://{_HOST}:{self.port}"

    @property
    def port(self) -> int:
        """TCP port OPA listens on (kept across :meth:`restart`).

        Raises:
            RuntimeError: If the server was never started.
        """
        if self._port is None:
            msg = "OpaServer has not been started"
            raise RuntimeError(msg)
        return self._port

    @property
    def process(self) -> subprocess.Popen[bytes]:
        """The current (or last) OPA process.

        Raises:
            RuntimeError: If the server was never started.
        """
        if self._process is None:
            msg = "OpaServer has not been started"
            raise RuntimeError(msg)
        return self._process

    @property
    def pid(self) -> int:
        """Process id of the current (or last) OPA process."""
        return self.process.pid

    @property
    def running(self) -> bool:
        """Whether the OPA process exists and has not exited (it may be paused)."""
        return self._process is not None and self._process.poll() is None

    @property
    def log_path(self) -> Path:
        """File receiving OPA's stdout and stderr (appended to across restarts).

        Raises:
            RuntimeError: If the server was never started or has been closed.
        """
        if self._workdir is None:
            msg = "OpaServer has no log: not started, or closed"
            raise RuntimeError(msg)
        return self._workdir / "opa.log"

    def read_log(self) -> str:
        """Return everything OPA has written to stdout and stderr so far.

        Returns:
            The log text (decision logs appear here with ``decision_logs.console=true``).
        """
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    # -- internals -----------------------------------------------------------------

    def _ensure_not_running(self) -> None:
        if self.running:
            msg = f"OPA is already running (pid {self.pid}) at {self.url}"
            raise RuntimeError(msg)

    def _require_running(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            msg = "OPA is not running"
            raise RuntimeError(msg)
        return self._process

    @staticmethod
    def _signal(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
        if proc.poll() is None:
            proc.send_signal(sig)

    def _prepare_workdir(self) -> Path:
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="opa-server-"))
        if self._data is not None:
            (self._workdir / "data.json").write_text(json.dumps(self._data), encoding="utf-8")
        return self._workdir

    def _command(self, port: int) -> list[str]:
        cmd = [self._binary, "run", "--server", f"--addr={_HOST}:{port}", *_DEFAULT_FLAGS]
        cmd += self._extra_args
        cmd += self._policy_paths
        if self._data is not None and self._workdir is not None:
            cmd.append(str(self._workdir / "data.json"))
        return cmd

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _launch(self, port: int) -> None:
        """Start one OPA process on ``port`` and wait for health.

        Raises:
            _PortInUseError: If OPA exited because the port was taken.
            RuntimeError: If OPA fails to start for any other reason.
        """
        self._ensure_not_running()
        workdir = self._prepare_workdir()
        self._close_log()
        log_path = workdir / "opa.log"
        self._log_file = log_path.open("ab")
        self._log_offset = self._log_file.tell()
        self._port = port
        try:
            self._process = subprocess.Popen(  # noqa: S603 - argv list, no shell
                self._command(port),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=subprocess.STDOUT,
                cwd=workdir,
            )
        except OSError as exc:
            self._close_log()
            msg = f"cannot execute OPA binary {self._binary!r}: {exc}"
            raise RuntimeError(msg) from exc
        self._wait_healthy()

    def _wait_healthy(self) -> None:
        proc = self.process
        deadline = time.monotonic() + self._ready_timeout
        while True:
            if proc.poll() is not None:
                self._fail(f"OPA exited with code {proc.returncode} before becoming healthy")
            if _health_ok(self.url) and proc.poll() is None:
                return
            if time.monotonic() >= deadline:
                self.kill()
                self._fail(f"OPA was not healthy within {self._ready_timeout:g}s")
            time.sleep(_POLL_INTERVAL)

    def _output_tail(self) -> str:
        try:
            with self.log_path.open("rb") as fh:
                fh.seek(self._log_offset)
                data = fh.read()
        except OSError:
            return ""
        return data[-_TAIL_BYTES:].decode("utf-8", "replace").strip()

    def _fail(self, reason: str) -> NoReturn:
        self._close_log()
        tail = self._output_tail()
        msg = (
            f"{reason} (addr {_HOST}:{self._port}, command: {' '.join(self._command(self.port))})."
            f"\nOPA stderr (tail):\n{tail or '<empty>'}"
        )
        if _ADDR_IN_USE in tail:
            raise _PortInUseError(msg)
        raise RuntimeError(msg)


class _PortInUseError(RuntimeError):
    """OPA could not bind its port; :meth:`OpaServer.start` retries on another one."""


class OpaContainer(_OpaRestMixin):
    """OPA in the pinned Docker image, through ``testcontainers`` (needs a Docker engine).

    Policies and data are pushed over the REST API after start, so no bind mounts are needed.
    """

    def __init__(
        self,
        *,
        image: str = OPA_IMAGE,
        policy_paths: Sequence[str | os.PathLike[str]] = (),
        data: Mapping[str, object] | None = None,
        extra_args: Sequence[str] = (),
        ready_timeout: float = 60.0,
    ) -> None:
        self._image = image
        self._policy_paths = [Path(p) for p in policy_paths]
        self._data = dict(data) if data is not None else None
        self._extra_args = list(extra_args)
        self._ready_timeout = ready_timeout
        self._container: DockerContainer | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """Base URL of the container's OPA as seen from this host.

        Raises:
            RuntimeError: If the container is not started.
        """
        if self._url is None:
            msg = "OpaContainer has not been started"
            raise RuntimeError(msg)
        return self._url

    def start(self) -> Self:
        """Start the container, wait for health, then push policies and data.

        Returns:
            This container, for chaining.

        Raises:
            RuntimeError: If ``testcontainers`` is missing, or OPA does not become healthy.
        """
        try:
            from testcontainers.core.container import DockerContainer  # noqa: PLC0415
        except ImportError as exc:
            msg = "OpaContainer needs the 'testcontainers' package (pip install testcontainers)"
            raise RuntimeError(msg) from exc
        return self._run(DockerContainer)  # pragma: no cover

    def stop(self) -> None:
        """Stop and remove the container; safe to call any number of times."""
        container, self._container, self._url = self._container, None, None
        if container is not None:  # pragma: no cover
            container.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _run(self, container_cls: type[DockerContainer]) -> Self:  # pragma: no cover
        command = ["run", "--server", f"--addr=0.0.0.0:{_CONTAINER_PORT}", *_DEFAULT_FLAGS]
        self._container = (
            container_cls(self._image)
            .with_exposed_ports(_CONTAINER_PORT)
            .with_command([*command, *self._extra_args])
        )
        try:
            self._container.start()
            host = self._container.get_container_host_ip()
            port = int(self._container.get_exposed_port(_CONTAINER_PORT))
            self._url = f"http://{host}:{port}"
            self._wait_healthy()
            self._push_policies_and_data()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_healthy(self) -> None:  # pragma: no cover
        deadline = time.monotonic() + self._ready_timeout
        while not _health_ok(self.url):
            if time.monotonic() >= deadline:
                msg = f"OPA container {self._image} was not healthy within {self._ready_timeout:g}s"
                raise RuntimeError(msg)
            time.sleep(0.1)

    def _push_policies_and_data(self) -> None:  # pragma: no cover
        for root in self._policy_paths:
            files = sorted(root.rglob("*.rego")) if root.is_dir() else [root]
            for file in files:
                # Same id as `opa run` gives a loaded file: its path as passed.
                self.put_policy(str(file), file.read_text(encoding="utf-8"))
        if self._data is not None:
            self.put_data("", self._data)


def _all_stopped(tasks: Path) -> bool:
    states = set()
    for thread in tasks.iterdir():
        try:
            # The state follows the parenthesised command name (which may hold spaces).
            states.add((thread / "stat").read_text().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, ProcessLookupError):  # a thread that just exited
            continue
    return states <= {"T", "t"}
