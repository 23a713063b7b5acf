"""The embedded Rego engine (regorus, in process): no server, microseconds per decision.

regorus engines are thread-affine (a call from another thread panics with a
``BaseException``), so each thread builds its own engine from the same loaded sources the
first time it evaluates, and rebuilds when the revision changes. Evaluation runs inline:
it takes microseconds and regorus never releases the GIL, so a thread hop would only add
cost. Everything regorus raises becomes a :class:`gateway.policy.PolicyError`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import threading
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, Final

from gateway import _json
from gateway.policy._decision import normalize
from gateway.policy._document import InputDocument
from gateway.policy._engine import DEFAULT_DECISION_PATH, EngineAnswer, normalize_path
from gateway.policy._errors import EngineError, PolicyError

_MAX_DETAIL: Final = 500
_EXACT_INT_LIMIT: Final = 2**53


# Per-thread regorus engines, keyed by the id of the EmbeddedEngine they serve. The local is
# module-level on purpose: a regorus engine is "unsendable" and refuses to be dropped on any
# thread but its own, and a per-instance local would drop every thread's engine on whichever
# thread releases the EmbeddedEngine. Here a thread's engines die with that thread, or on its
# next cache miss once their EmbeddedEngine is gone.
_THREAD_ENGINES: Final = threading.local()


class PolicyLoadError(PolicyError):
    """A policy set that does not parse, compile or survive its warm-up evaluation."""

    code = "policy_load_error"


@dataclass(frozen=True, slots=True)
class PolicySources:
    """The files of one policy set, as loaded: module texts by path, and the data document."""

    modules: tuple[tuple[str, str], ...]
    data: Mapping[str, Any]
    revision: str

    @classmethod
    def from_directory(cls, root: str | os.PathLike[str]) -> PolicySources:
        """Read every ``*.rego`` (except ``*_test.rego``) and every ``data.json`` below root.

        A ``data.json`` in ``a/b/`` is placed at ``data.a.b``, as ``opa run`` does.

        Raises:
            PolicyLoadError: the directory is missing, has no policy, or a file is unreadable
                or not valid JSON.
        """
        base = Path(root)
        if not base.is_dir():
            raise PolicyLoadError(f"policy directory {str(base)!r} does not exist")
        modules: list[tuple[str, str]] = []
        data: dict[str, Any] = {}
        hasher = hashlib.sha256()
        try:
            for path in sorted(base.rglob("*")):
                relative = path.relative_to(base).as_posix()
                if path.suffix == ".rego" and not path.name.endswith("_test.rego"):
                    text = path.read_text(encoding="utf-8")
                    modules.append((relative, text))
                elif path.name == "data.json":
                    text = path.read_text(encoding="utf-8")
                    _merge(data, path.parent.relative_to(base).parts, json.loads(text))
                else:
                    continue
                hasher.update(relative.encode() + b"\0" + text.encode() + b"\0")
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise PolicyLoadError(f"cannot read policies: {exc}") from None
        if not modules:
            raise PolicyLoadError(f"no .rego policy found under {str(base)!r}")
        return cls(tuple(modules), data, hasher.hexdigest()[:16])


def _merge(target: dict[str, Any], parts: tuple[str, ...], value: Any) -> None:
    node = target
    for part in parts:
        node = node.setdefault(part, {})
    if not isinstance(value, dict) or not isinstance(node, dict):
        raise ValueError("data.json must hold an object")  # noqa: TRY004 - reported as a load error
    node.update(value)


def _detail(exc: BaseException) -> str:
    # With RUST_BACKTRACE set, regorus appends a ~2 KB backtrace; keep only the message.
    text = str(exc).split("\nStack backtrace:", 1)[0].split("\nstack backtrace:", 1)[0]
    return text[:_MAX_DETAIL]


def _is_control_flow(exc: BaseException) -> bool:
    return isinstance(exc, KeyboardInterrupt | SystemExit | GeneratorExit)


def _build(sources: PolicySources) -> Any:
    import regorus  # noqa: PLC0415 - imported where used so the core never needs it

    engine = regorus.Engine()
    try:
        for name, text in sources.modules:
            engine.add_policy(name, text)
        engine.add_data_json(json.dumps(sources.data))
    except BaseException:
        # regorus engines are thread-affine. A traceback keeps this frame alive, and the
        # cyclic collector may free it on any thread: the frame must not hold the engine.
        engine = None
        raise
    return engine


def _exact_in_binary64(number: int | Decimal) -> bool:
    # regorus holds numbers as binary64. A number is safe when it maps to a double that no
    # other decimal of the same or shorter form maps to: then rounding is injective and
    # monotone on the values involved, so comparisons and equality come out as in OPA,
    # which compares exactly. Integers must be exactly representable; decimals must
    # round-trip through their shortest repr (19.99 does; 1e400 and 0.1000000000000000001
    # do not).
    try:
        as_float = float(number)
    except OverflowError:
        return False
    if not math.isfinite(as_float):
        return False
    if isinstance(number, int):
        return abs(number) <= _EXACT_INT_LIMIT or as_float == number
    return Decimal(repr(as_float)) == number


def _first_inexact(encoded: bytes) -> str | None:
    stack: list[Any] = [_json.parse(encoded, max_depth=10_000)]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif (
            isinstance(node, int | Decimal)
            and not isinstance(node, bool)
            and not _exact_in_binary64(node)
        ):
            return str(node)[:64]
    return None


# The parts of an input document repeat (one tool definition, a few contexts, the same small
# argument documents), so their verdicts are remembered by their exact encoded bytes.
_first_inexact_cached = functools.lru_cache(maxsize=8192)(_first_inexact)
_CACHEABLE: Final = 4096


def _check_exact_numbers(document: InputDocument) -> None:
    for part in (document.canonical_arguments, document.context.json, document.tool_json):
        found = _first_inexact_cached(part) if len(part) <= _CACHEABLE else _first_inexact(part)
        if found is not None:
            raise EngineError(
                "input holds a number the embedded engine cannot represent exactly",
                detail=f"inexact number {found}",
            )


class EmbeddedEngine:
    """Evaluates Rego in process with regorus.

    Args:
        sources: the policy set (see :meth:`from_directory`).
        directory: where to :meth:`reload` from, if the sources came from a directory.

    Raises:
        PolicyLoadError: the policy set does not compile or fails its warm-up evaluation.
    """

    def __init__(
        self,
        sources: PolicySources,
        *,
        directory: str | os.PathLike[str] | None = None,
        warm_up_path: str = DEFAULT_DECISION_PATH,
    ) -> None:
        self._directory = None if directory is None else Path(directory)
        self._warm_up_path = normalize_path(warm_up_path)
        self._lock = threading.Lock()
        self._check(sources)
        self._sources = sources

    @classmethod
    def from_directory(
        cls, directory: str | os.PathLike[str], *, warm_up_path: str = DEFAULT_DECISION_PATH
    ) -> EmbeddedEngine:
        """Load a policy directory (``*.rego`` and ``data.json``)."""
        return cls(
            PolicySources.from_directory(directory),
            directory=directory,
            warm_up_path=warm_up_path,
        )

    @property
    def identity(self) -> str:
        """``embedded:<directory>`` (or ``embedded:<id>`` for in-memory sources)."""
        where = str(self._directory) if self._directory is not None else hex(id(self))
        return f"embedded:{where}"

    def revision(self) -> str:
        """A digest of the loaded files; it changes on every reload of changed files."""
        return self._sources.revision

    @property
    def sources(self) -> PolicySources:
        """The policy set in force."""
        return self._sources

    def _check(self, sources: PolicySources) -> None:
        # Unknown functions and type errors only surface at evaluation: warm up once.
        engine: Any = None
        try:
            engine = _build(sources)
            engine.set_input_json('{"arguments":{},"context":{},"tool":{}}')
            engine.eval_query("data." + self._warm_up_path.replace("/", "."))
        except BaseException as exc:
            # The raised error's traceback keeps this frame: it must not keep the engine,
            # which panics if the last reference goes on another thread.
            engine = None
            if _is_control_flow(exc):
                raise
            raise PolicyLoadError("policy set failed to load", detail=_detail(exc)) from None

    def reload(self) -> bool:
        """Re-read the directory; keep the previous policy set if the new one fails.

        Returns:
            Whether the revision changed.

        Raises:
            PolicyLoadError: the new set does not load (the previous one stays active).
        """
        if self._directory is None:
            raise PolicyLoadError("engine was not loaded from a directory")
        sources = PolicySources.from_directory(self._directory)
        if sources.revision == self._sources.revision:
            return False
        self._check(sources)
        with self._lock:
            self._sources = sources
        return True

    def _engine(self) -> Any:
        sources = self._sources
        engines: dict[int, tuple[weakref.ref[EmbeddedEngine], str, Any]] | None = getattr(
            _THREAD_ENGINES, "engines", None
        )
        if engines is None:
            engines = _THREAD_ENGINES.engines = {}
        entry = engines.get(id(self))
        if entry is not None and entry[0]() is self and entry[1] == sources.revision:
            return entry[2]
        for key in [key for key, (owner, _, _) in engines.items() if owner() is None]:
            del engines[key]  # engines of EmbeddedEngines that are gone, dropped on this thread
        engine = _build(sources)
        engines[id(self)] = (weakref.ref(self), sources.revision, engine)
        return engine

    def evaluate_sync(self, path: str, document: InputDocument) -> EngineAnswer:
        """Evaluate in the calling thread (any thread)."""
        _check_exact_numbers(document)
        rule = "data." + path.replace("/", ".")
        revision = self._sources.revision
        engine: Any = None
        try:
            engine = self._engine()
            engine.set_input_json(document.to_json().decode("utf-8"))
            value = engine.eval_rule(rule)
            # eval_rule answers None both for undefined and for a rule whose value is null;
            # only the JSON form tells them apart (OPA reads null as a defined value).
            defined = value is not None or engine.eval_rule_as_json(rule) == "null"
        except BaseException as exc:
            # A retained traceback keeps this frame; it must not keep the thread's engine.
            engine = None
            # pyo3 panics are BaseExceptions; they are engine errors, not control flow.
            if _is_control_flow(exc):
                raise
            if "not a valid rule path" in str(exc):
                return EngineAnswer(defined=False, revision=revision)
            raise EngineError("embedded engine error", detail=_detail(exc)) from None
        if not defined:
            return EngineAnswer(defined=False, revision=revision)
        return EngineAnswer(
            defined=True, value=normalize(value), decision_id=uuid.uuid4().hex, revision=revision
        )

    async def evaluate(self, path: str, document: InputDocument) -> EngineAnswer:
        """Evaluate inline on the running loop's thread (microseconds, no I/O)."""
        return self.evaluate_sync(path, document)

    def __repr__(self) -> str:
        return f"EmbeddedEngine({self.identity!r}, revision={self.revision()!r})"
