"""The WebAssembly engine: OPA's own compiled policy (``opa build -t wasm``), run in process.

OPA's compiler stays the single source of meaning: the module it emits is evaluated by
wasmtime with the input bytes the gateway admitted, so numbers reach the policy exactly and
regular expressions and builtins are OPA's own (compiled into the module). The one builtin
the shipped policies need from the host, ``sprintf``, prints as Go's ``fmt`` does and fails
closed on anything it does not implement; a module needing any other host builtin is
refused at load.

Every evaluation has a hard deadline (wasmtime epoch interruption; ``engine_timeout`` when
it passes) and every instance a memory cap. An evaluation runs inline on the caller's
thread: it takes microseconds, and the deadline bounds how long it can ever hold the loop.
Each thread gets its own store and instance (they are single-threaded); a new bundle is
compiled and checked before it replaces the one in force, which stays if it fails.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import uuid
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from gateway.policy import _rego_value
from gateway.policy._bundle import Bundle, BundleError, VerificationKey, build_bundle, read_bundle
from gateway.policy._engine import DEFAULT_DECISION_PATH, EngineAnswer, normalize_path
from gateway.policy._errors import EngineError, EngineTimeoutError, EngineUnavailableError
from gateway.policy._wasm_abi import (
    AbiError,
    CompiledPolicy,
    EpochTicker,
    EvaluationTrap,
    PolicyInstance,
    compile_policy,
    new_engine,
)

#: Default deadline of one evaluation.
DEFAULT_TIMEOUT_S: Final = 0.25
#: Default cap on one instance's linear memory.
DEFAULT_MEMORY_LIMIT: Final = 64 << 20
#: How often the epoch advances: the deadline's resolution.
DEFAULT_TICK_S: Final = 0.005
_MAX_DETAIL: Final = 300
_RESULT_PREFIX: Final = b'{{"result": '
_RESULT_SUFFIX: Final = b"}}"
_UNDEFINED: Final = b"set()"


@dataclass(frozen=True, slots=True)
class _Loaded:
    bundle: Bundle
    policy: CompiledPolicy


class WasmEngine:
    """Evaluates OPA-compiled WebAssembly policy bundles in process.

    Args:
        bundle: the bundle to serve (see :func:`gateway.policy.read_bundle`).
        timeout_s: the hard deadline of one evaluation (``engine_timeout`` past it).
        memory_limit: the most linear memory one instance may use, in bytes.
        tick_s: the deadline's resolution.
        identity: the engine's name in cache keys and decisions.

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
    ) -> None:
        if timeout_s <= 0 or tick_s <= 0:
            raise ValueError("timeout_s and tick_s must be positive")
        self._engine = new_engine()
        self._memory_limit = memory_limit
        self._timeout_s = timeout_s
        self._ticker = EpochTicker(self._engine, tick_s)
        weakref.finalize(self, self._ticker.stop)
        self._ticks = self._ticker.ticks_for(timeout_s)
        self._identity = identity or f"wasm:{hex(id(self))}"
        self._lock = threading.Lock()
        self._local = threading.local()
        self._closed = False
        self._source: tuple[Path, Path, str] | None = None
        self._loaded = self._compile(bundle)

    @classmethod
    def from_bundle(
        cls,
        source: str | os.PathLike[str] | bytes,
        *,
        verification: VerificationKey | None = None,
        **options: Any,
    ) -> WasmEngine:
        """Load a bundle directory, a ``.tar.gz`` file or its bytes (verified if a key is set)."""
        if "identity" not in options and not isinstance(source, bytes):
            options["identity"] = f"wasm:{Path(source)}"
        return cls(read_bundle(source, verification=verification), **options)

    @classmethod
    def from_directory(
        cls,
        directory: str | os.PathLike[str],
        *,
        warm_up_path: str = DEFAULT_DECISION_PATH,
        timeout: float = DEFAULT_TIMEOUT_S,
        opa_binary: str | os.PathLike[str] | None = None,
        **options: Any,
    ) -> WasmEngine:
        """Compile a policy directory with ``opa build -t wasm`` and serve it.

        The signature matches :meth:`EmbeddedEngine.from_directory`, so either engine can
        serve a directory. ``warm_up_path`` is the compiled entrypoint; the ``opa`` binary
        is ``opa_binary``, else ``$OPA_BIN``, else ``opa`` on ``PATH``.

        Raises:
            BundleError: no ``opa`` binary, a failed build, or a bundle that does not load.
        """
        binary = opa_binary or os.environ.get("OPA_BIN") or shutil.which("opa")
        if not binary:
            raise BundleError("no opa binary to compile policies with (set OPA_BIN)")
        entrypoint = normalize_path(warm_up_path)
        with tempfile.TemporaryDirectory(prefix="gateway-wasm-") as scratch:
            built = build_bundle(
                binary, directory, Path(scratch, "bundle.tar.gz"), entrypoints=(entrypoint,)
            )
            bundle = read_bundle(built)
        options.setdefault("identity", f"wasm:{Path(directory)}")
        engine = cls(bundle, timeout_s=timeout, **options)
        engine._source = (Path(directory), Path(binary), entrypoint)
        return engine

    def reload(self) -> bool:
        """Rebuild from the directory this engine was compiled from; keep the old on failure.

        Returns:
            Whether the revision changed.

        Raises:
            BundleError: not built from a directory, or the new build does not load.
        """
        if self._source is None:
            raise BundleError("engine was not built from a directory")
        directory, binary, entrypoint = self._source
        with tempfile.TemporaryDirectory(prefix="gateway-wasm-") as scratch:
            built = build_bundle(
                binary, directory, Path(scratch, "bundle.tar.gz"), entrypoints=(entrypoint,)
            )
            return self.activate(read_bundle(built))

    @property
    def identity(self) -> str:
        """``wasm:<bundle path>`` or the identity given."""
        return self._identity

    @property
    def timeout_s(self) -> float:
        """The deadline of one evaluation."""
        return self._timeout_s

    @property
    def bundle(self) -> Bundle:
        """The bundle in force."""
        return self._loaded.bundle

    def revision(self) -> str:
        """The revision of the bundle in force (its manifest's, else a digest of it)."""
        return self._loaded.bundle.revision

    def _compile(self, bundle: Bundle) -> _Loaded:
        try:
            policy = compile_policy(
                self._engine, bundle.wasm, bundle.data, memory_limit=self._memory_limit
            )
        except (AbiError, EvaluationTrap) as exc:
            raise BundleError(
                "policy bundle failed to load", detail=str(exc)[:_MAX_DETAIL]
            ) from None
        return _Loaded(bundle, policy)

    def activate(self, bundle: Bundle) -> bool:
        """Put a new bundle in force once it compiles and loads; keep the old one otherwise.

        Returns:
            Whether the revision changed.

        Raises:
            BundleError: the new bundle does not load (the previous one stays active).
        """
        loaded = self._compile(bundle)
        with self._lock:
            changed = loaded.bundle.revision != self._loaded.bundle.revision
            self._loaded = loaded
        return changed

    def close(self) -> None:
        """Stop the deadline clock; evaluations after this fail closed."""
        self._ticker.stop()
        self._closed = True

    def _instance(self, loaded: _Loaded) -> PolicyInstance:
        instance: PolicyInstance | None = getattr(self._local, "instance", None)
        if instance is None or instance.policy is not loaded.policy:
            instance = PolicyInstance(loaded.policy)
            self._local.instance = instance
        return instance

    def evaluate_sync(self, path: str, document: bytes) -> EngineAnswer:
        """Evaluate ``path`` over the input document's JSON bytes, on the calling thread."""
        if self._closed:
            raise EngineUnavailableError("wasm engine is closed")
        loaded = self._loaded
        revision = loaded.bundle.revision
        entrypoint = loaded.policy.entrypoints.get(path)
        if entrypoint is None:
            # Only compiled entrypoints can be asked; anything else has no decision.
            return EngineAnswer(defined=False, revision=revision)
        if b"\\ud" in document or b"\\uD" in document:
            document = _without_surrogate_escapes(document)
        try:
            instance = self._instance(loaded)
            text = instance.evaluate(entrypoint, document, self._ticks)
        except EvaluationTrap as exc:
            # A trapped instance may hold a half-built heap: the thread gets a fresh one.
            self._local.instance = None
            if exc.timed_out:
                raise EngineTimeoutError(
                    "wasm evaluation passed its deadline", detail=f"timeout_s={self._timeout_s}"
                ) from None
            raise EngineError("wasm evaluation failed", detail=str(exc)[:_MAX_DETAIL]) from None
        except AbiError as exc:
            self._local.instance = None
            raise EngineError("wasm instance failed", detail=str(exc)[:_MAX_DETAIL]) from None
        return _answer(text, revision)

    async def evaluate(self, path: str, document: Any) -> EngineAnswer:
        """Evaluate inline: microseconds, never longer than ``timeout_s``."""
        return self.evaluate_sync(path, document.to_json())

    def __repr__(self) -> str:
        return f"WasmEngine({self.identity!r}, revision={self.revision()!r})"


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


_SURROGATE_PAIR: Final = re.compile(
    rb"\\\\|\\u(d[89ab][0-9a-f]{2})\\u(d[c-f][0-9a-f]{2})", re.IGNORECASE
)


def _answer(text: bytes, revision: str) -> EngineAnswer:
    if text == _UNDEFINED:
        return EngineAnswer(defined=False, revision=revision)
    value: Any
    try:
        decoded = text.decode("utf-8")
        # The result set of one entrypoint is {{"result": value}}; its value alone is read
        # first. If the slice is not one JSON value, the whole set takes the full reader.
        if text.startswith(_RESULT_PREFIX) and text.endswith(_RESULT_SUFFIX):
            inner = decoded[len(_RESULT_PREFIX) : -len(_RESULT_SUFFIX)]
            try:
                value = _rego_value.dump_to_json(inner)
            except _rego_value.RegoValueError:
                value = _single_result(decoded)
        else:
            value = _single_result(decoded)
    except (UnicodeDecodeError, _rego_value.RegoValueError) as exc:
        raise EngineError("wasm result is unreadable", detail=str(exc)[:_MAX_DETAIL]) from None
    return EngineAnswer(defined=True, value=value, decision_id=uuid.uuid4().hex, revision=revision)


def _single_result(text: str) -> Any:
    results = _rego_value.parse(text)
    if not isinstance(results, _rego_value.RegoSet) or len(results.items) != 1:
        raise _rego_value.RegoValueError("result set does not hold exactly one result")
    (only,) = results.items
    if not isinstance(only, _rego_value.RegoObject) or [k for k, _ in only.items] != ["result"]:
        raise _rego_value.RegoValueError("result is not {result: value}")
    return _rego_value.to_json(only.items[0][1])
