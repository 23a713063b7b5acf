"""The suite's own markers: what is an integration test, and the fast suite's guard."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest

from tests import conftest

TESTS = Path(conftest.__file__).resolve().parent


@dataclass
class _Item:
    """The parts of a collected test the marking reads."""

    fspath: Path
    name: str = "test_x"
    fixturenames: list[str] = field(default_factory=list)


def integration(relative: str, *fixtures: str, name: str = "test_x") -> bool:
    item = _Item(TESTS / relative, name, list(fixtures))
    return conftest._is_integration(cast(Any, item))


def test_a_test_using_a_real_opa_or_a_live_server_fixture_is_integration() -> None:
    for fixture in ("opa_server", "opa_binary", "shared_opa", "start_gateway", "world"):
        assert integration("policy/test_cache.py", "tmp_path", fixture), fixture


def test_the_reliability_replay_and_real_mcp_folders_are_integration() -> None:
    for relative in ("reliability/test_load.py", "replay/test_x.py", "mcp/real/test_x.py"):
        assert integration(relative), relative


def test_listed_modules_and_tests_are_integration_and_their_neighbours_are_not() -> None:
    assert integration("policy/test_wasm.py")
    listed = next(iter(conftest.INTEGRATION_TESTS))
    module, _, name = listed.partition("::")
    assert integration(module, name=name)
    assert not integration(module, name="test_something_else")


def test_a_unit_test_with_ordinary_fixtures_is_not_integration() -> None:
    assert not integration("test_json.py", "tmp_path", "monkeypatch", "capsys")
    assert not integration("policy/test_cache.py")


def test_every_listed_module_and_test_exists() -> None:
    for relative in conftest.INTEGRATION_MODULES:
        assert (TESTS / relative).is_file(), relative
    for listed in conftest.INTEGRATION_TESTS | conftest.SLOW_TESTS:
        module, _, name = listed.partition("::")
        text = (TESTS / module).read_text(encoding="utf-8")
        assert f"def {name}(" in text, listed


@pytest.mark.parametrize("event", ["subprocess.Popen", "socket.bind", "os.posix_spawn"])
def test_the_fast_suite_guard_refuses_a_process_or_a_socket(
    event: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(conftest._guard, "active", True)
    with pytest.raises(RuntimeError, match=re.escape("mark it integration in tests/conftest.py")):
        conftest._audit(event, ())


def test_the_guard_lets_other_events_and_inactive_tests_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(conftest._guard, "active", True)
    conftest._audit("open", ())
    monkeypatch.setitem(conftest._guard, "active", False)
    conftest._audit("subprocess.Popen", ())
