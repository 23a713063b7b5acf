"""The embedded engine's own guarantees: what it refuses at load, its deadline, its memory cap.

Policies are compiled by the real ``opa build -t wasm`` from small directories written here.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import threading
from pathlib import Path
from typing import Final

import pytest
import wasmtime

from gateway.policy import (
    DecisionCache,
    EmbeddedEngine,
    EngineError,
    EngineTimeoutError,
    EngineUnavailableError,
    InputDocument,
    PolicyAuthorizer,
    PolicyLoadError,
    _epoch,
    _wasm_abi,
    caller_context,
)
from gateway.policy._bundle import Bundle, BundleError
from tests.policy.conftest import authorization, denied_without_running, guarded
from tests.policy.wasm_support import built_bundle

SLOW: Final = """package slow

# Work that grows with the input: a deadline of a millisecond cannot hold it.
spin := count([x | some x in numbers.range(1, input.n); x % 7 == 0])

hog := count(concat("", [sprintf("%d", [x]) | some x in numbers.range(1, input.n)]))

echo := input

dump := count(sprintf("%v", [numbers.range(1, input.n)]))

guarded := {"allow": count([x | some x in numbers.range(1, input.arguments.n); x % 7 == 0]) < 0}
"""
NEEDS_HTTP: Final = """package net

answer := http.send({"method": "GET", "url": input.url}).status_code
"""
VALUES: Final = """package values

echo := input.value

text := input.text
"""


def _bundle(
    opa_binary: str, root: Path, name: str, text: str, entrypoints: tuple[str, ...]
) -> Bundle:
    directory = root / name
    directory.mkdir(exist_ok=True)
    (directory / f"{name}.rego").write_text(text)
    return built_bundle(opa_binary, str(directory), entrypoints)


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the policies of this module are written."""
    return tmp_path_factory.mktemp("wasm")


@pytest.fixture(scope="module")
def slow(opa_binary: str, scratch: Path) -> Bundle:
    """A policy whose work grows with ``input.n``."""
    return _bundle(
        opa_binary,
        scratch,
        "slow",
        SLOW,
        ("slow/spin", "slow/hog", "slow/dump", "slow/echo", "slow/guarded"),
    )


@pytest.fixture(scope="module")
def values(opa_binary: str, scratch: Path) -> Bundle:
    """A policy that hands its input back."""
    return _bundle(opa_binary, scratch, "values", VALUES, ("values/echo", "values/text"))


def test_a_module_that_needs_a_builtin_the_host_lacks_is_refused_at_load(
    opa_binary: str, scratch: Path
) -> None:
    bundle = _bundle(opa_binary, scratch, "net", NEEDS_HTTP, ("net/answer",))
    with pytest.raises(BundleError) as caught:
        EmbeddedEngine(bundle)
    assert caught.value.code == "policy_load_error"
    assert "http.send" in (caught.value.detail or "")


def test_bytes_that_are_not_a_module_are_refused_at_load(values: Bundle) -> None:
    with pytest.raises(BundleError):
        EmbeddedEngine(dataclasses.replace(values, wasm=b"\0asm\x01\0\0\0garbage"))


def test_data_that_is_not_json_is_refused_at_load(values: Bundle) -> None:
    with pytest.raises(BundleError):
        EmbeddedEngine(dataclasses.replace(values, data=b"{not json"))


def test_an_evaluation_past_its_deadline_fails_closed_with_engine_timeout(slow: Bundle) -> None:
    engine = EmbeddedEngine(slow, timeout_s=0.001, tick_s=0.001)
    with pytest.raises(EngineTimeoutError) as caught:
        engine.evaluate_sync("slow/spin", b'{"n": 100000000}')
    assert caught.value.code == "engine_timeout"
    # The thread's instance was replaced: the next evaluation runs normally. (It takes
    # microseconds; a busy machine may still preempt it past a 1 ms deadline: a few tries.)
    assert any(_spins(engine) for _ in range(20))
    engine.close()


def _spins(engine: EmbeddedEngine) -> bool:
    try:
        return bool(engine.evaluate_sync("slow/spin", b'{"n": 70}').value == 10)
    except EngineTimeoutError:
        return False


async def test_a_deadline_passing_inside_a_host_builtin_is_a_timeout_too(slow: Bundle) -> None:
    # The host's sprintf calls back into the module (to dump its operands, to load its
    # result): a deadline that passes there, or while the host formats, is the same timeout
    # as anywhere else, never an engine error. Deadlines of 1..20 ticks land at different
    # points of an evaluation that spends most of its time in sprintf.
    outcomes = set()
    for ticks in range(1, 21):
        engine = EmbeddedEngine(slow, timeout_s=ticks * 0.002, tick_s=0.002)
        try:
            engine.evaluate_sync("slow/dump", b'{"n": 100000}')
        except EngineTimeoutError:
            outcomes.add("engine_timeout")
        except EngineError as exc:
            outcomes.add(f"{exc.code}: {exc.detail}")
        else:
            outcomes.add("answered")
        finally:
            engine.close()
    assert outcomes == {"engine_timeout"}


async def test_a_timed_out_decision_denies_behind_a_guard(slow: Bundle) -> None:
    engine = EmbeddedEngine(slow, timeout_s=0.001, tick_s=0.001)
    binding, tool = guarded(PolicyAuthorizer(engine, path="slow/guarded"))
    error = await denied_without_running(binding, tool, '{"n": 100000000}')
    assert error.code == "engine_timeout"


def test_an_evaluation_that_outgrows_the_memory_cap_fails_closed(slow: Bundle) -> None:
    engine = EmbeddedEngine(slow, memory_limit=4 << 20, timeout_s=30)
    with pytest.raises(EngineError) as caught:
        engine.evaluate_sync("slow/hog", b'{"n": 10000000}')
    assert caught.value.code == "engine_error"
    assert engine.evaluate_sync("slow/hog", b'{"n": 9}').value == 9


def test_an_input_larger_than_the_memory_cap_fails_closed(values: Bundle) -> None:
    engine = EmbeddedEngine(values, memory_limit=2 << 20)
    big = b'{"value": "' + b"x" * (4 << 20) + b'"}'
    with pytest.raises(EngineError):
        engine.evaluate_sync("values/echo", big)
    assert engine.evaluate_sync("values/echo", b'{"value": 1}').value == 1


@pytest.mark.parametrize("size", [1 << 20, 5 << 20, 3 << 20])
def test_memory_grown_by_an_evaluation_is_read_whole_by_it_and_the_next(
    values: Bundle, size: int
) -> None:
    engine = EmbeddedEngine(values, memory_limit=64 << 20)
    # Each input is larger than the memory the last one left; the module grows it again.
    for text in ("x" * size, "y" * (size // 2), "z"):
        answer = engine.evaluate_sync("values/text", b'{"text": "' + text.encode() + b'"}')
        assert answer.value == text


def test_linear_memory_grows_in_place() -> None:
    engine = _epoch.new_engine()
    store = wasmtime.Store(engine)
    limits = wasmtime.Limits(1, 1024)
    memory = wasmtime.Memory(store, wasmtime.MemoryType(limits))
    base = ctypes.addressof(memory.data_ptr(store).contents)
    memory.grow(store, 1000)
    assert ctypes.addressof(memory.data_ptr(store).contents) == base


def test_a_module_that_needs_more_memory_than_the_cap_is_refused(values: Bundle) -> None:
    with pytest.raises(BundleError):
        EmbeddedEngine(values, memory_limit=64 << 10)


@pytest.mark.parametrize(
    "number",
    [b"9007199254740993", b"-9007199254740993", b"0.1000000000000000001", b"1e400", b"1E-400",
     b"123456789012345678901234567890.000000000000000000001"],
)  # fmt: skip
def test_numbers_reach_the_policy_and_come_back_exactly(values: Bundle, number: bytes) -> None:
    engine = EmbeddedEngine(values)
    answer = engine.evaluate_sync("values/echo", b'{"value": ' + number + b"}")
    assert answer.defined
    assert str(answer.value).lower() == number.decode().lower() or answer.value == _exact(number)


def _exact(number: bytes) -> object:
    from decimal import Decimal

    return Decimal(number.decode())


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (rb'{"text": "\ud840\udc00"}', "\U00020000"),
        (rb'{"text": "\uD83D\uDE00!"}', "\U0001f600!"),
        (rb'{"text": "\\ud840\\udc00"}', "\\ud840\\udc00"),
        (rb'{"text": "\\\ud83d\ude00"}', "\\\U0001f600"),
        ('{"text": "\U00020000"}'.encode(), "\U00020000"),
    ],
)
def test_escaped_surrogate_pairs_reach_the_policy_as_their_character(
    values: Bundle, raw: bytes, text: str
) -> None:
    engine = EmbeddedEngine(values)
    assert engine.evaluate_sync("values/text", raw).value == text


def test_a_path_that_is_not_a_compiled_entrypoint_is_undefined(values: Bundle) -> None:
    engine = EmbeddedEngine(values)
    assert engine.evaluate_sync("values/other", b"{}").defined is False


def test_each_thread_evaluates_on_its_own_instance(values: Bundle) -> None:
    engine = EmbeddedEngine(values)
    results: dict[int, list[object]] = {}

    def work(worker: int) -> None:
        results[worker] = [
            engine.evaluate_sync("values/echo", b'{"value": %d}' % (worker * 1000 + i)).value
            for i in range(200)
        ]

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == {n: [n * 1000 + i for i in range(200)] for n in range(4)}


def test_a_bundle_that_fails_to_load_leaves_the_one_in_force(values: Bundle) -> None:
    engine = EmbeddedEngine(values)
    before = engine.revision()
    with pytest.raises(BundleError):
        engine.activate(dataclasses.replace(values, wasm=b"broken", revision="next"))
    assert engine.revision() == before
    assert engine.evaluate_sync("values/echo", b'{"value": 2}').value == 2


def test_a_new_bundle_is_put_in_force(values: Bundle) -> None:
    engine = EmbeddedEngine(values)
    assert engine.activate(dataclasses.replace(values, revision="r2")) is True
    assert engine.revision() == "r2"
    assert engine.activate(dataclasses.replace(values, revision="r2")) is False


def test_the_first_evaluation_of_a_new_bundle_takes_the_instance_made_at_its_load(
    values: Bundle,
) -> None:
    engine = EmbeddedEngine(values)
    loader = threading.Thread(
        target=engine.activate, args=(dataclasses.replace(values, revision="r2"),)
    )
    loader.start()
    loader.join()
    loaded = engine._loaded
    (spare,) = loaded.spares
    assert spare.policy is loaded.policy
    assert engine.evaluate_sync("values/echo", b'{"value": 3}').value == 3
    # The evaluating thread made none: it took the one made on the loading thread.
    assert engine._local.instance is spare
    assert loaded.spares == []


def test_a_closed_engine_fails_closed(values: Bundle) -> None:
    engine = EmbeddedEngine(values)
    engine.close()
    with pytest.raises(EngineUnavailableError) as caught:
        asyncio.run(engine.evaluate("values/echo", InputDocument(authorization())))
    assert caught.value.code == "engine_unavailable"


def test_invalid_deadlines_are_refused(values: Bundle) -> None:
    with pytest.raises(ValueError, match="positive"):
        EmbeddedEngine(values, timeout_s=0)


def test_a_directory_is_compiled_with_the_opa_binary_and_reloaded_on_change(
    opa_binary: str, tmp_path: Path
) -> None:
    (tmp_path / "values.rego").write_text(VALUES)
    (tmp_path / "skipped_test.rego").write_text("package values_test\n\ntest_x if false\n")
    engine = EmbeddedEngine.from_directory(
        tmp_path, entrypoints=("data.values.echo",), opa_binary=opa_binary
    )
    assert engine.identity == f"embedded:{tmp_path}"
    assert engine.entrypoints == ("values/echo",)
    assert engine.evaluate_sync("values/echo", b'{"value": 3}').value == 3
    before = engine.revision()
    assert engine.reload() is False
    (tmp_path / "values.rego").write_text(VALUES.replace("input.value", "[input.value]"))
    assert engine.reload() is True
    assert engine.revision() != before
    assert engine.evaluate_sync("values/echo", b'{"value": 3}').value == [3]
    (tmp_path / "values.rego").write_text("package values\n\necho := ")
    with pytest.raises(BundleError):
        engine.reload()
    assert engine.evaluate_sync("values/echo", b'{"value": 3}').value == [3]


def test_a_directory_without_an_opa_binary_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPA_BIN", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BundleError, match="no opa binary"):
        EmbeddedEngine.from_directory(tmp_path)


def test_a_missing_policy_directory_refuses_to_load(opa_binary: str, tmp_path: Path) -> None:
    with pytest.raises(PolicyLoadError):
        EmbeddedEngine.from_directory(tmp_path / "nope", opa_binary=opa_binary)


def test_a_directory_without_a_policy_refuses_to_load(opa_binary: str, tmp_path: Path) -> None:
    (tmp_path / "only_test.rego").write_text("package t_test\n\ntest_x if true\n")
    with pytest.raises(PolicyLoadError):
        EmbeddedEngine.from_directory(tmp_path, opa_binary=opa_binary)


def test_every_bundle_error_is_a_policy_load_error() -> None:
    assert issubclass(BundleError, PolicyLoadError)
    assert BundleError("x").code == PolicyLoadError("x").code == "policy_load_error"


def _counting_opa(opa_binary: str, folder: Path) -> tuple[Path, Path]:
    log = folder / "builds.log"
    wrapper = folder / "opa"
    wrapper.write_text(f'#!/bin/sh\necho build >> "{log}"\nexec "{opa_binary}" "$@"\n')
    wrapper.chmod(0o755)
    return wrapper, log


def test_a_directory_already_built_in_this_process_is_not_built_again(
    opa_binary: str, tmp_path: Path
) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "values.rego").write_text(VALUES)
    tools = tmp_path / "tools"
    tools.mkdir()
    wrapper, log = _counting_opa(opa_binary, tools)
    entrypoints = ("values/echo",)
    first = EmbeddedEngine.from_directory(policies, entrypoints=entrypoints, opa_binary=wrapper)
    second = EmbeddedEngine.from_directory(policies, entrypoints=entrypoints, opa_binary=wrapper)
    assert log.read_text().count("build") == 1
    assert first.revision() == second.revision()
    assert second.evaluate_sync("values/echo", b'{"value": 3}').value == 3
    # Any change of a source file (or of the entrypoints) is built afresh.
    (policies / "values.rego").write_text(VALUES.replace("input.value", "[input.value]"))
    assert second.reload() is True
    assert log.read_text().count("build") == 2
    assert second.evaluate_sync("values/echo", b'{"value": 3}').value == [3]
    EmbeddedEngine.from_directory(
        policies, entrypoints=(*entrypoints, "values/text"), opa_binary=wrapper
    )
    assert log.read_text().count("build") == 3


def test_a_compiled_module_is_remembered_for_the_next_engine(values: Bundle) -> None:
    import hashlib

    EmbeddedEngine(values)
    assert _wasm_abi._MODULES.get(hashlib.sha256(values.wasm).digest()) is not None
    again = EmbeddedEngine(values)
    assert again.evaluate_sync("values/echo", b'{"value": 5}').value == 5


async def test_reload_invalidates_cached_decisions(opa_binary: str, tmp_path: Path) -> None:
    allow = 'package gateway.authz\n\ndecision := {"allow": true, "cache": {"ttl_s": 60}}\n'
    (tmp_path / "p.rego").write_text(allow)
    engine = EmbeddedEngine.from_directory(tmp_path, opa_binary=opa_binary)
    authorizer = PolicyAuthorizer(engine, cache=DecisionCache(max_ttl=60))
    with caller_context(subject="alice"):
        assert (await authorizer.authorize(authorization())).allowed is True
        (tmp_path / "p.rego").write_text(allow.replace("true", "false"))
        assert engine.reload() is True
        decision = await authorizer.authorize(authorization())
    assert decision.allowed is False
    assert decision.cached is False
