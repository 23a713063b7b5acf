"""The embedded engine: OPA's own compiled policy (``opa build -t wasm``), run in process.

OPA's compiler stays the single source of meaning: the module it emits is evaluated by
wasmtime with the input bytes the gateway admitted, so numbers reach the policy exactly and
regular expressions and builtins are OPA's own (compiled into the module). The one builtin
the shipped policies need from the host, ``sprintf``, prints as Go's ``fmt`` does and fails
closed on anything it does not implement; a module needing any other host builtin is
refused at load.

Every evaluation has a hard deadline (wasmtime epoch interruption; ``engine_timeout`` when
it passes) and every instance a memory cap. wasmtime is called through ctypes, which lets
go of the GIL for the call, so an evaluation on a thread leaves the event loop free:

* an input of at most ``inline_bytes`` is evaluated inline, with a budget of ``inline_s``
  (microseconds is the usual; a thread hop would cost more than the evaluation);
* an evaluation that overruns that budget is abandoned and run again on a worker thread
  with what remains of its deadline (evaluation is pure: running it twice is harmless),
  and a larger input goes to a worker thread at once.

So the loop is never held longer than ``inline_s`` (plus one tick), and no evaluation
outlives ``timeout_s``. Each thread gets its own store and instance (they are
single-threaded); a new bundle is compiled and checked before it replaces the one in force,
which stays if it fails. Compiled modules and ``opa build`` outputs are remembered per
process, so a second engine over the same policy loads in milliseconds.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import hashlib
import json
import logging
import os
import random
import re
import shutil
import tempfile
import threading
import time
import urllib.parse
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from gateway._ids import random_hex
from gateway.policy import _rego_value
from gateway.policy._bundle import (
    DEFAULT_MAX_BUNDLE_BYTES,
    Bundle,
    BundleError,
    BundlePoller,
    PollResult,
    VerificationKey,
    build_bundle,
    digest_revision,
    policy_files,
    poll_delay,
    read_bundle,
)
from gateway.policy._document import InputDocument
from gateway.policy._engine import (
    DEFAULT_DECISION_PATH,
    EngineAnswer,
    EngineInput,
    ItemAnswer,
    normalize_path,
)
from gateway.policy._epoch import EpochTicker
from gateway.policy._errors import (
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    PolicyError,
)
from gateway.policy._wasm_abi import (
    AbiError,
    CompiledPolicy,
    EvaluationTrap,
    PolicyInstance,
    compile_policy,
)

#: Default deadline of one evaluation (the configuration's ``engine.timeout_s``).
DEFAULT_TIMEOUT_S: Final = 1.0
#: Default cap on one instance's linear memory.
DEFAULT_MEMORY_LIMIT: Final = 64 << 20
#: How often the epoch advances: the deadline's resolution.
DEFAULT_TICK_S: Final = 0.005
#: Inputs up to this size are evaluated inline first.
DEFAULT_INLINE_BYTES: Final = 64 << 10
#: How long an inline evaluation may hold the event loop before it moves to a thread.
DEFAULT_INLINE_S: Final = 0.005
#: Worker threads for evaluations off the loop (each holds one instance).
DEFAULT_THREADS: Final = 2
_MAX_DETAIL: Final = 300
_RESULT_PREFIX: Final = b'{{"result": '
_RESULT_SUFFIX: Final = b"}}"
_UNDEFINED: Final = b"set()"
_BUILD_MEMO: Final = 16
_REVISIONS_KEPT: Final = 1024
#: Result texts remembered as read well (each at most this long).
_KNOWN_TEXTS: Final = 1024
_KNOWN_TEXT_MAX_BYTES: Final = 4096
#: Default time between two polls of a bundle server (OPA's default is 60 s at most).
DEFAULT_POLL_INTERVAL_S: Final = 10.0
_LOG: Final = logging.getLogger("gateway.policy")


@dataclass(frozen=True, slots=True)
class _Loaded:
    bundle: Bundle
    policy: CompiledPolicy
    #: The bundle's revision, made distinct if it names other contents than before.
    revision: str
    contents: str
    #: Instances made when the bundle was loaded, for the first threads to evaluate it.
    spares: list[PolicyInstance]


class _Overrun(Exception):  # noqa: N818 - control flow: the inline budget ran out
    pass


class _Builds:
    """``opa build`` outputs of this process, by a digest of the binary, entrypoints and files."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._bundles: collections.OrderedDict[str, bytes] = collections.OrderedDict()

    @staticmethod
    def key(binary: Path, directory: Path, entrypoints: tuple[str, ...]) -> str:
        hasher = hashlib.sha256()
        try:
            status = binary.stat()
            hasher.update(f"{binary}\0{status.st_size}\0{status.st_mtime_ns}\0".encode())
            hasher.update("\0".join(entrypoints).encode() + b"\0\0")
            for path in policy_files(directory):
                hasher.update(path.relative_to(directory).as_posix().encode() + b"\0")
                content = path.read_bytes()
                hasher.update(len(content).to_bytes(8, "big") + content)
        except OSError as exc:
            raise BundleError("policies are unreadable", detail=str(exc)[:_MAX_DETAIL]) from None
        return hasher.hexdigest()

    def build(self, binary: Path, directory: Path, entrypoints: tuple[str, ...]) -> Bundle:
        key = self.key(binary, directory, entrypoints)
        with self._lock:
            archive = self._bundles.get(key)
            if archive is not None:
                self._bundles.move_to_end(key)
        if archive is None:
            with tempfile.TemporaryDirectory(prefix="gateway-wasm-") as scratch:
                built = build_bundle(
                    binary, directory, Path(scratch, "bundle.tar.gz"), entrypoints=entrypoints
                )
                archive = built.read_bytes()
            with self._lock:
                self._bundles[key] = archive
                while len(self._bundles) > self._size:
                    self._bundles.popitem(last=False)
        return read_bundle(archive)


_BUILDS: Final = _Builds(_BUILD_MEMO)


def opa_binary_path(opa_binary: str | os.PathLike[str] | None = None) -> Path:
    """The ``opa`` to compile with: ``opa_binary``, else ``$OPA_BIN``, else ``opa`` on ``PATH``.

    Raises:
        BundleError: there is none.
    """
    binary = opa_binary or os.environ.get("OPA_BIN") or shutil.which("opa")
    if not binary:
        raise BundleError("no opa binary to compile policies with (set OPA_BIN)")
    return Path(binary).resolve()


def _retrieve(future: asyncio.Future[EngineAnswer]) -> None:
    # An answer nobody waits for any more (its caller timed out or was cancelled) is read
    # here, so that asyncio does not report it as never retrieved.
    if not future.cancelled():
        future.exception()


def _shut_down(ticker: EpochTicker, threads: concurrent.futures.ThreadPoolExecutor) -> None:
    threads.shutdown(wait=False, cancel_futures=True)
    ticker.stop()


class EmbeddedEngine:
    """Evaluates OPA-compiled WebAssembly policy bundles in process (see the module docstring).

    Args:
        bundle: the bundle to serve (see :func:`gateway.policy.read_bundle`).
        timeout_s: the hard deadline of one evaluation (``engine_timeout`` past it).
        memory_limit: the most linear memory one instance may use, in bytes.
        tick_s: the deadline's resolution.
        identity: the engine's name in cache keys and decisions.
        inline_bytes: the largest input evaluated inline (on the caller's thread) first.
        inline_s: how long an inline evaluation may run before it moves to a thread.
        threads: worker threads for evaluations off the event loop.

    Raises:
        BundleError: the bundle's module does not compile, speaks another ABI or needs
            a builtin the host lacks, or its data does not load.
    """

    def __init__(
        self,
        bundle: Bundle,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
        tick_s: float = DEFAULT_TICK_S,
        identity: str | None = None,
        inline_bytes: int = DEFAULT_INLINE_BYTES,
        inline_s: float = DEFAULT_INLINE_S,
        threads: int = DEFAULT_THREADS,
    ) -> None:
        if not (timeout_s > 0 and tick_s > 0 and inline_s > 0):
            raise ValueError("timeout_s, tick_s and inline_s must be positive")
        if threads < 1 or inline_bytes < 0:
            raise ValueError("threads must be >= 1 and inline_bytes >= 0")
        self._memory_limit = memory_limit
        self._timeout_s = float(timeout_s)
        self._tick_s = float(tick_s)
        # The engine is the tick interval's own, shared by every engine of that interval.
        self._ticker = EpochTicker(self._tick_s)
        self._engine = self._ticker.engine
        self._ticks = self._ticker.ticks_for(timeout_s)
        self._inline_bytes = inline_bytes
        # The inline budget ends the evaluation itself only when it is the whole deadline.
        self._inline_ticks = min(self._ticker.ticks_for(inline_s), self._ticks)
        self._inline_final = self._inline_ticks == self._ticks
        self._identity = identity or f"embedded:{hex(id(self))}"
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = False
        self._source: tuple[Path, Path, tuple[str, ...]] | None = None
        self._contents: dict[str, str] = {}
        try:
            self._loaded = self._distinct(self._compile(bundle))
        except BaseException:
            self._ticker.stop()  # no finalizer yet: an engine that failed keeps no clock
            raise
        #: Result texts read well before (by exact bytes, bounded): see :meth:`_read`.
        self._known_texts: dict[bytes, None] = {}
        self._poller: BundlePoller | None = None
        self._polling: threading.Thread | None = None
        self._stop_polling = threading.Event()
        self._poll_interval_s = DEFAULT_POLL_INTERVAL_S
        self._poll_max_interval_s: float | None = None
        self._poll_lock = threading.Lock()
        #: What the last poll of the bundle server did, if there was one.
        self.last_poll: PollResult | None = None
        self._threads = concurrent.futures.ThreadPoolExecutor(
            max_workers=threads, thread_name_prefix="gateway-embedded"
        )
        self._finalizer = weakref.finalize(self, _shut_down, self._ticker, self._threads)

    @classmethod
    def from_bundle(
        cls,
        source: str | os.PathLike[str] | bytes,
        *,
        verification: VerificationKey | None = None,
        **options: Any,
    ) -> EmbeddedEngine:
        """Load a bundle directory, a ``.tar.gz`` file or its bytes (verified if a key is set).

        Raises:
            BundleError: unreadable, unverified (with a key), or it does not load.
        """
        if "identity" not in options and not isinstance(source, bytes):
            options["identity"] = f"embedded:{Path(source)}"
        return cls(read_bundle(source, verification=verification), **options)

    @classmethod
    def from_directory(
        cls,
        directory: str | os.PathLike[str],
        *,
        entrypoints: tuple[str, ...] = (DEFAULT_DECISION_PATH,),
        opa_binary: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> EmbeddedEngine:
        """Compile a policy directory with ``opa build -t wasm`` and serve it.

        Only the ``entrypoints`` are compiled (only they can be asked). The ``opa`` binary
        is ``opa_binary``, else ``$OPA_BIN``, else ``opa`` on ``PATH``. A directory whose
        files (and binary) were built before in this process is not built again.

        Raises:
            BundleError: no ``opa`` binary, a failed build, or a bundle that does not load.
        """
        binary = opa_binary_path(opa_binary)
        root = Path(directory)
        if not root.is_dir():
            raise BundleError("policy directory does not exist")
        compiled = tuple(normalize_path(entrypoint) for entrypoint in entrypoints)
        bundle = _BUILDS.build(binary, root, compiled)
        options.setdefault("identity", f"embedded:{root}")
        engine = cls(bundle, **options)
        engine._source = (root, binary, compiled)
        return engine

    @classmethod
    def from_bundle_server(
        cls,
        url: str,
        *,
        verification: VerificationKey | None = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        poll_max_interval_s: float | None = None,
        download_timeout_s: float = 10.0,
        headers: dict[str, str] | None = None,
        max_bundle_bytes: int = DEFAULT_MAX_BUNDLE_BYTES,
        start: bool = True,
        **options: Any,
    ) -> EmbeddedEngine:
        """Download a bundle from an OPA bundle server, serve it, and follow the server.

        The first download must succeed (and verify, with a key); afterwards the server is
        polled every ``poll_interval_s`` (to ``poll_max_interval_s``) as :meth:`follow`
        describes (from now, or from :meth:`start_polling` when ``start`` is false).
        ``headers`` (credentials) go to the server's origin only, never into the engine's
        identity, logs or errors.

        Raises:
            BundleError: the first download, its verification or its loading failed.
        """
        if not poll_interval_s > 0:
            raise ValueError("interval_s must be positive")
        if poll_max_interval_s is not None and not poll_max_interval_s >= poll_interval_s:
            raise ValueError("max_interval_s must be at least interval_s")
        first: list[Bundle] = []
        probe = BundlePoller(
            url,
            activate=first.append,
            verification=verification,
            timeout_s=download_timeout_s,
            headers=headers,
            max_bytes=max_bundle_bytes,
        )
        result = probe.poll()
        if not first:
            raise result.error or BundleError("bundle server sent no bundle")
        options.setdefault("identity", f"embedded:{_public_url(url)}")
        engine = cls(first[0], **options)
        engine.follow(
            url,
            verification=verification,
            interval_s=poll_interval_s,
            max_interval_s=poll_max_interval_s,
            download_timeout_s=download_timeout_s,
            headers=headers,
            max_bundle_bytes=max_bundle_bytes,
            etag=probe.etag,
            start=start,
        )
        return engine

    def follow(
        self,
        url: str,
        *,
        verification: VerificationKey | None = None,
        interval_s: float = DEFAULT_POLL_INTERVAL_S,
        max_interval_s: float | None = None,
        download_timeout_s: float = 10.0,
        headers: dict[str, str] | None = None,
        max_bundle_bytes: int = DEFAULT_MAX_BUNDLE_BYTES,
        etag: str | None = None,
        start: bool = True,
    ) -> None:
        """Poll an OPA bundle server every ``interval_s`` on a daemon thread, as OPA does.

        Each poll is one GET with the last ETag (``304``: unchanged). A new bundle is
        verified (with a key), compiled and checked before it is put in force between two
        evaluations; a download, verification or load that fails keeps the bundle in force
        and is logged, and the next poll tries again. A new revision makes the decisions
        cached under the old one unused. A bundle the server has is in force at most
        ``interval_s`` plus one download (``download_timeout_s`` at most) and its
        compilation later. With ``max_interval_s``, each wait is drawn at random between
        ``interval_s`` and it (OPA's ``min_delay_seconds`` and ``max_delay_seconds``), so
        replicas do not poll in step. With ``start`` false, polling begins at
        :meth:`start_polling`.

        Raises:
            ValueError: a URL that is not http(s), a non-positive interval or one whose
                maximum is below it, or a bundle server followed already.
        """
        if not interval_s > 0:
            raise ValueError("interval_s must be positive")
        if max_interval_s is not None and not max_interval_s >= interval_s:
            raise ValueError("max_interval_s must be at least interval_s")
        poller = BundlePoller(
            url,
            activate=self.activate,
            verification=verification,
            timeout_s=download_timeout_s,
            headers=headers,
            max_bytes=max_bundle_bytes,
            etag=etag,
        )
        with self._lock:
            if self._poller is not None:
                raise ValueError("this engine already follows a bundle server")
            self._poller = poller
            self._poll_interval_s = float(interval_s)
            self._poll_max_interval_s = max_interval_s
        if start:
            self.start_polling()

    def start_polling(self) -> None:
        """Start polling the bundle server :meth:`follow` named (idempotent).

        Raises:
            BundleError: this engine follows no bundle server.
            EngineUnavailableError: the engine is closed.
        """
        with self._lock:
            poller = self._poller
            if poller is None:
                raise BundleError("engine follows no bundle server")
            if self._closed:
                raise EngineUnavailableError("embedded engine is closed")
            if self._polling is not None:
                return
            self._stop_polling = threading.Event()
            self._polling = threading.Thread(
                target=self._follow,
                args=(
                    poller,
                    self._poll_interval_s,
                    self._poll_max_interval_s,
                    self._stop_polling,
                ),
                name="gateway-bundle-poll",
                daemon=True,
            )
            self._polling.start()

    def _follow(
        self,
        poller: BundlePoller,
        interval_s: float,
        max_interval_s: float | None,
        stop: threading.Event,
    ) -> None:
        draw = random.SystemRandom().random
        while not stop.wait(poll_delay(interval_s, max_interval_s, draw)):
            self._poll_with(poller)

    def _poll_with(self, poller: BundlePoller) -> PollResult:
        with self._poll_lock:
            try:
                result = poller.poll()
            except Exception as exc:  # noqa: BLE001 - polling goes on; the bundle in force stays
                result = PollResult(
                    "failed", error=BundleError("bundle poll failed", detail=type(exc).__name__)
                )
            self.last_poll = result
        if result.error is not None:
            _LOG.warning(
                "bundle poll failed, revision %s stays in force: %s (%s)",
                self.revision(),
                result.error,
                result.error.detail or "",
            )
        elif result.outcome == "activated":
            _LOG.info("bundle revision %s in force", self.revision())
        return result

    def poll_now(self) -> PollResult:
        """Poll the bundle server once, now, on the calling thread (it blocks).

        Raises:
            BundleError: this engine follows no bundle server.
        """
        poller = self._poller
        if poller is None:
            raise BundleError("engine follows no bundle server")
        return self._poll_with(poller)

    def stop_polling(self, *, wait: bool = True) -> None:
        """Stop polling (idempotent; :meth:`start_polling` resumes).

        With ``wait``, a poll under way ends first (a download takes ``download_timeout_s``
        at most); without, it ends by itself and its bundle, if any, is still put in force.
        """
        with self._lock:
            thread, self._polling = self._polling, None
            self._stop_polling.set()
        if wait and thread is not None and thread is not threading.current_thread():
            thread.join()

    @property
    def polling(self) -> bool:
        """Whether a bundle server is being polled."""
        return self._polling is not None

    @property
    def following(self) -> bool:
        """Whether this engine follows a bundle server (see :meth:`follow`)."""
        return self._poller is not None

    def reload(self) -> bool:
        """Rebuild from the directory this engine was compiled from; keep the old on failure.

        Returns:
            Whether the revision changed.

        Raises:
            BundleError: not built from a directory, or the new build does not load.
        """
        if self._source is None:
            raise BundleError("engine was not built from a directory")
        directory, binary, entrypoints = self._source
        return self.activate(_BUILDS.build(binary, directory, entrypoints))

    @property
    def identity(self) -> str:
        """``embedded:<bundle or directory>`` or the identity given."""
        return self._identity

    @property
    def timeout_s(self) -> float:
        """The deadline of one evaluation."""
        return self._timeout_s

    @property
    def bundle(self) -> Bundle:
        """The bundle in force."""
        return self._loaded.bundle

    @property
    def entrypoints(self) -> tuple[str, ...]:
        """The decision paths the bundle in force can answer."""
        return tuple(self._loaded.policy.entrypoints)

    def revision(self) -> str:
        """The revision of the bundle in force: its manifest's, else a digest of it.

        A revision seen before with other contents (republished without a new revision)
        is followed by ``+`` and a digest of the contents, so decisions cached under the
        earlier contents are not reused.
        """
        return self._loaded.revision

    def _compile(self, bundle: Bundle) -> _Loaded:
        try:
            policy = compile_policy(
                self._engine, bundle.wasm, bundle.data, memory_limit=self._memory_limit
            )
            # One instance made here, where the bundle is loaded (a poller's thread, or
            # start-up): the first evaluation after a swap, inline on the event loop most
            # often, takes it instead of making one (about a millisecond).
            spare = PolicyInstance(policy)
        except (AbiError, EvaluationTrap) as exc:
            raise BundleError(
                "policy bundle failed to load", detail=str(exc)[:_MAX_DETAIL]
            ) from None
        contents = digest_revision(bundle.wasm, bundle.data)
        return _Loaded(bundle, policy, bundle.revision, contents, [spare])

    def _distinct(self, loaded: _Loaded) -> _Loaded:
        # Decisions are cached by revision: a revision that names other contents than it did
        # before (a bundle republished without a new revision) gets a revision of its own.
        first = self._contents.setdefault(loaded.bundle.revision, loaded.contents)
        if len(self._contents) > _REVISIONS_KEPT:
            self._contents.pop(next(iter(self._contents)))
        if first == loaded.contents:
            return loaded
        return dataclasses.replace(loaded, revision=f"{loaded.bundle.revision}+{loaded.contents}")

    def activate(self, bundle: Bundle) -> bool:
        """Put a new bundle in force once it compiles and loads; keep the old one otherwise.

        Returns:
            Whether the revision changed.

        Raises:
            BundleError: the new bundle does not load (the previous one stays active).
        """
        loaded = self._compile(bundle)
        with self._lock:
            loaded = self._distinct(loaded)
            changed = loaded.revision != self._loaded.revision
            self._loaded = loaded
        return changed

    def close(self) -> None:
        """Stop polling, the worker threads and the deadline clock; later evaluations fail closed.

        An engine that follows a bundle server is held by its polling thread: close it.

        An evaluation already running keeps its deadline: the clock stops once it is past.
        """
        self._closed = True
        self.stop_polling(wait=False)
        self._threads.shutdown(wait=False, cancel_futures=True)
        self._finalizer.detach()
        stopper = threading.Timer(self._timeout_s + 2 * self._tick_s, self._ticker.stop)
        stopper.daemon = True
        stopper.start()

    def __enter__(self) -> EmbeddedEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _instance(self, loaded: _Loaded) -> PolicyInstance:
        instance: PolicyInstance | None = getattr(self._local, "instance", None)
        if instance is None or instance.policy is not loaded.policy:
            try:
                instance = loaded.spares.pop()  # atomic: one thread gets each spare
            except IndexError:
                instance = PolicyInstance(loaded.policy)
            self._local.instance = instance
        return instance

    def _run(
        self,
        path: str,
        document: InputDocument | bytes,
        ticks: int,
        *,
        final: bool,
        head: bytes | None = None,
    ) -> EngineAnswer:
        # An InputDocument is handed over in pieces: its head (every member but ``tool``,
        # ``head`` if the caller made it already) and the tool's definition, which the
        # instance keeps parsed. Bytes are the whole document, parsed whole.
        if self._closed:
            raise EngineUnavailableError("embedded engine is closed")
        loaded = self._loaded
        revision = loaded.revision
        entrypoint = loaded.policy.entrypoints.get(path)
        if entrypoint is None:
            # Only compiled entrypoints can be asked; anything else has no decision.
            return EngineAnswer(defined=False, revision=revision)
        try:
            instance = self._instance(loaded)
            text: bytes | None = None
            if not isinstance(document, bytes):
                if head is None:
                    head = document.head_json()
                tool = document.tool_json
                if _SURROGATE_HINT.search(head) is None and _SURROGATE_HINT.search(tool) is None:
                    # The tool's definition is parsed once per instance, not with every input.
                    text = instance.evaluate_member(entrypoint, head, _TOOL, tool, ticks)
                if text is None:
                    document = document.to_json()
            if text is None:
                assert isinstance(document, bytes)  # noqa: S101 - encoded just above
                if _SURROGATE_HINT.search(document) is not None:
                    document = _without_surrogate_escapes(document)
                text = instance.evaluate(entrypoint, document, ticks)
        except EvaluationTrap as exc:
            # A trapped instance may hold a half-built heap: the thread gets a fresh one.
            self._local.instance = None
            if exc.timed_out:
                if not final:
                    raise _Overrun from None
                raise EngineTimeoutError(
                    "embedded evaluation passed its deadline",
                    detail=f"timeout_s={self._timeout_s}",
                ) from None
            raise EngineError("embedded evaluation failed", detail=str(exc)[:_MAX_DETAIL]) from None
        except AbiError as exc:
            self._local.instance = None
            raise EngineError("embedded instance failed", detail=str(exc)[:_MAX_DETAIL]) from None
        return self._read(text, revision)

    def _read(self, text: bytes, revision: str) -> EngineAnswer:
        # A result text read well once reads the same every time: its answer is decoded
        # only when its value is asked for (a reader memoizing by the text never asks).
        known = self._known_texts
        if text in known:
            return _LazyAnswer(text, revision)
        answer = _answer(text, revision)
        if answer.defined and len(text) <= _KNOWN_TEXT_MAX_BYTES:
            if len(known) >= _KNOWN_TEXTS:
                known.clear()
            known[text] = None
        return answer

    def _run_until(
        self, path: str, document: InputDocument | bytes, deadline: float
    ) -> EngineAnswer:
        # On a worker thread: whatever remains of the deadline set when the call began.
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise EngineTimeoutError(
                "embedded evaluation passed its deadline", detail=f"timeout_s={self._timeout_s}"
            )
        return self._run(path, document, self._ticker.ticks_for(remaining), final=True)

    def evaluate_sync(self, path: str, document: InputDocument | bytes) -> EngineAnswer:
        """Evaluate ``path`` on the calling thread, for at most ``timeout_s``.

        ``document`` is an input document or its JSON bytes. For threads that may block;
        from the event loop, use :meth:`evaluate`.

        Raises:
            EngineTimeoutError: the evaluation passed its deadline.
            EngineUnavailableError: the engine is closed.
            EngineError: the policy failed on this input.
        """
        return self._run(path, document, self._ticks, final=True)

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """Evaluate, holding the event loop no longer than ``inline_s`` (plus one tick).

        Raises:
            EngineTimeoutError: the evaluation passed ``timeout_s``.
            EngineUnavailableError: the engine is closed.
            EngineError: the policy failed on this input.
        """
        deadline = time.monotonic() + self._timeout_s
        # Large arguments are encoded off the loop too (canonical JSON and facts take time).
        if len(document.arguments) <= self._inline_bytes:
            head = document.head_json()
            if len(head) + len(document.tool_json) <= self._inline_bytes:
                try:
                    return self._run(
                        path, document, self._inline_ticks, final=self._inline_final, head=head
                    )
                except _Overrun:
                    pass  # too slow for the loop: again on a thread, within the same deadline
        loop = asyncio.get_running_loop()
        try:
            job = loop.run_in_executor(self._threads, self._run_until, path, document, deadline)
        except RuntimeError:  # the executor was shut down by close()
            raise EngineUnavailableError("embedded engine is closed") from None
        job.add_done_callback(_retrieve)
        try:
            # The job ends by the deadline by itself; this bounds only its wait for a thread.
            async with asyncio.timeout(deadline - time.monotonic() + 2 * self._tick_s):
                return await asyncio.shield(job)
        except TimeoutError:
            job.cancel()
            raise EngineTimeoutError(
                "embedded evaluation passed its deadline", detail=f"timeout_s={self._timeout_s}"
            ) from None

    def _run_many(
        self, path: str, documents: Sequence[EngineInput], deadline: float
    ) -> list[ItemAnswer]:
        # One worker thread for the batch, one deadline for all of it: an item that fails
        # (or finds the deadline passed) is undecided, the others are still evaluated.
        answers: list[ItemAnswer] = []
        for document in documents:
            try:
                answers.append(self._run_until(path, document.to_json(), deadline))
            except PolicyError as exc:
                answers.append(exc)
        return answers

    async def evaluate_many(self, path: str, documents: Sequence[EngineInput]) -> list[ItemAnswer]:
        """Evaluate ``path`` over every document in one thread hop, within one ``timeout_s``.

        Returns one entry per document: its answer, or the error that left it undecided.

        Raises:
            EngineUnavailableError: the engine is closed.
        """
        if not documents:
            return []
        deadline = time.monotonic() + self._timeout_s
        loop = asyncio.get_running_loop()
        try:
            job = loop.run_in_executor(self._threads, self._run_many, path, documents, deadline)
        except RuntimeError:  # the executor was shut down by close()
            raise EngineUnavailableError("embedded engine is closed") from None
        return await job

    def __repr__(self) -> str:
        return f"EmbeddedEngine({self.identity!r}, revision={self.revision()!r})"


#: The former name of :class:`EmbeddedEngine`.
WasmEngine = EmbeddedEngine


def _public_url(url: str) -> str:
    # A bundle URL as it may appear in names and logs: no credentials, query or fragment.
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


#: The member of the input the engine keeps parsed per instance, and how it is spelled.
_TOOL: Final = b"tool"
_TOOL_MEMBER: Final = b',"tool":'


def _head(document: bytes, tool: bytes) -> bytes | None:
    # The document without its last member, ``"tool": tool`` (an InputDocument's members
    # are in sorted order, the tool's last); None if it does not end so. If the head parses
    # as an object (the instance checks), the whole document is that object with the member
    # added: what the module then gets is what it would make of the whole document.
    start = len(document) - len(tool) - len(_TOOL_MEMBER) - 1
    if (
        start > 1
        and document.endswith(b"}")
        and document.startswith(_TOOL_MEMBER, start)
        and document.startswith(tool, start + len(_TOOL_MEMBER))
    ):
        return document[:start] + b"}"
    return None


def _without_surrogate_escapes(document: bytes) -> bytes:
    # The module's JSON reader decodes an escaped surrogate pair (\ud840\udc00) to the wrong
    # character; written out as UTF-8 it reads right. Only the pairs change: numbers and
    # everything else keep their exact text. An escaped backslash is matched (and kept) as
    # a unit, so the text after it is never mistaken for an escape.
    return _SURROGATE_PAIR.sub(_pair_to_utf8, document)


def _pair_to_utf8(match: re.Match[bytes]) -> bytes:
    if match.group(1) is None:
        return match.group(0)
    high, low = int(match.group(1), 16), int(match.group(2), 16)
    return chr(0x10000 + ((high - 0xD800) << 10) + (low - 0xDC00)).encode("utf-8")


#: Where an escaped surrogate might start (one scan; most inputs have none).
_SURROGATE_HINT: Final = re.compile(rb"\\u[dD]")
_SURROGATE_PAIR: Final = re.compile(
    rb"\\\\|\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})", re.IGNORECASE
)


def _no_constant(name: str) -> Any:
    raise ValueError("not a JSON number")


#: The reader of a result that is JSON (no sets): exact decimals, no NaN or Infinity. Made
#: once: building a decoder per result costs more than the reading. It takes no hook for
#: duplicate members (one per object would double the cost): OPA's runtime keeps an object
#: as a hash table and prints each key once.
_RESULT_READER: Final = json.JSONDecoder(parse_float=Decimal, parse_constant=_no_constant)
#: Its scanner, called directly: the value the slice starts with and where it ends (the
#: slice is the value alone only if that is its end). It raises StopIteration on no value.
_SCAN: Final[Callable[[str, int], tuple[Any, int]]] = _RESULT_READER.scan_once  # type: ignore[attr-defined]


def _answer(text: bytes, revision: str) -> EngineAnswer:
    if text == _UNDEFINED:
        return EngineAnswer(defined=False, revision=revision)
    value: Any
    try:
        # The result set of one entrypoint is {{"result": value}}; its value alone is read
        # first. If the slice is not one JSON value, the whole set takes the full reader.
        if text.startswith(_RESULT_PREFIX) and text.endswith(_RESULT_SUFFIX):
            inner = text[len(_RESULT_PREFIX) : -len(_RESULT_SUFFIX)].decode("utf-8")
            try:
                value, end = _SCAN(inner, 0)
            except (ValueError, RecursionError, StopIteration):
                end = -1
            if end != len(inner):
                # Not JSON: a set or a non-string key, which the Rego reader knows.
                try:
                    value = _rego_value.dump_to_json(inner)
                except _rego_value.RegoValueError:
                    value = _single_result(text.decode("utf-8"))
        else:
            value = _single_result(text.decode("utf-8"))
    except (UnicodeDecodeError, _rego_value.RegoValueError) as exc:
        raise EngineError("wasm result is unreadable", detail=str(exc)[:_MAX_DETAIL]) from None
    # A random 128-bit id, as uuid4().hex is, without building a UUID. (Positional
    # arguments: defined, value, decision_id, revision; keywords cost more here.)
    return EngineAnswer(True, value, random_hex(), revision, text)


#: EngineAnswer's own slot for ``value``, which :class:`_LazyAnswer` fills on first use.
_VALUE_SLOT: Final = EngineAnswer.__dict__["value"]
# Its other slots' setters: a frozen dataclass's fields are set through ``object.__setattr__``,
# which costs twice as much as the slot's own setter.
_SET_DEFINED: Final = EngineAnswer.__dict__["defined"].__set__
_SET_DECISION_ID: Final = EngineAnswer.__dict__["decision_id"].__set__
_SET_REVISION: Final = EngineAnswer.__dict__["revision"].__set__
_SET_TEXT: Final = EngineAnswer.__dict__["text"].__set__


class _LazyAnswer(EngineAnswer):
    """A defined answer whose text was read well before: decoded only if ``value`` is read.

    Reading is a pure function of the text, so the decoding cannot fail here; every read of
    ``value`` after the first returns the value decoded then.
    """

    __slots__ = ("_decoded",)
    _decoded: bool

    def __init__(self, text: bytes, revision: str) -> None:
        # EngineAnswer's __init__ would assign ``value`` through the property: every field
        # is set through its slot instead.
        _SET_DEFINED(self, True)
        _VALUE_SLOT.__set__(self, None)
        _SET_DECISION_ID(self, random_hex())
        _SET_REVISION(self, revision)
        _SET_TEXT(self, text)
        _SET_DECODED(self, False)

    @property
    def value(self) -> Any:
        if not self._decoded:
            _VALUE_SLOT.__set__(self, _answer(self.text or b"", "").value)
            _SET_DECODED(self, True)
        return _VALUE_SLOT.__get__(self)


_SET_DECODED: Final = _LazyAnswer.__dict__["_decoded"].__set__


def _single_result(text: str) -> Any:
    results = _rego_value.parse(text)
    if not isinstance(results, _rego_value.RegoSet) or len(results.items) != 1:
        raise _rego_value.RegoValueError("result set does not hold exactly one result")
    (only,) = results.items
    if not isinstance(only, _rego_value.RegoObject) or [k for k, _ in only.items] != ["result"]:
        raise _rego_value.RegoValueError("result is not {result: value}")
    return _rego_value.to_json(only.items[0][1])
