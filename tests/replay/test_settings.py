"""The [replay] and [shadow] tables: off by default, strict, and building a real candidate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gateway.policy import EmbeddedEngine, OpaRestEngine
from gateway.replay._settings import (
    SettingsError,
    ShadowSettings,
    build_candidate,
    parse_replay,
    parse_shadow,
)
from tests.replay.conftest import key_entry


def test_both_are_off_unless_turned_on(tmp_path: Path) -> None:
    assert parse_replay({}, tmp_path) is None
    assert parse_replay({"capture": False, "capture_dir": "x"}, tmp_path) is None
    assert parse_shadow({}, tmp_path) is None
    assert parse_shadow({"enabled": False, "policies": "p"}, tmp_path) is None


def test_the_capture_takes_its_folder_and_its_key_ring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RING", key_entry("k1", 1))

    settings = parse_replay({"capture": True, "capture_dir": "cap", "key_env": "RING"}, tmp_path)

    assert settings is not None
    assert settings.capture_dir == tmp_path / "cap"
    assert settings.keyring.active_id == "k1"


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"capture": True, "key_env": "RING"}, "replay.capture_dir: required"),
        ({"capture": True, "capture_dir": "c"}, "replay.key_env: give exactly one"),
        (
            {"capture": True, "capture_dir": "c", "key_env": "RING", "key_file": "f"},
            "exactly one",
        ),
        ({"capture": True, "capture_dir": "c", "key_env": "UNSET_RING"}, "replay.key_env:"),
        ({"capture": "yes"}, "replay.capture: must be bool"),
        ({"capture": True, "capture_dir": "c", "key_env": "RING", "keys": "x"}, "unknown key"),
    ],
)
def test_an_invalid_replay_table_names_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: dict[str, Any], problem: str
) -> None:
    monkeypatch.setenv("RING", key_entry("k1", 1))

    with pytest.raises(SettingsError, match=problem):
        parse_replay(table, tmp_path)


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ({"enabled": True}, "exactly one candidate"),
        ({"enabled": True, "policies": "p", "url": "http://127.0.0.1:1"}, "exactly one"),
        ({"enabled": True, "policies": "p", "queue_size": 0}, "shadow.queue_size"),
        ({"enabled": True, "policies": "p", "workers": True}, "shadow.workers: must be int"),
        ({"enabled": True, "policies": "p", "budget_s": -1}, "shadow.budget_s"),
        ({"enabled": True, "policies": "p", "budget_s": float("inf")}, "shadow.budget_s"),
        ({"enabled": True, "policies": "p", "decision_path": "a..b"}, "decision_path"),
        ({"enabled": True, "policies": "p", "candidate": "p"}, "shadow.candidate: unknown"),
    ],
)
def test_an_invalid_shadow_table_names_its_key(
    tmp_path: Path, table: dict[str, Any], problem: str
) -> None:
    with pytest.raises(SettingsError, match=problem):
        parse_shadow(table, tmp_path)


def test_an_embedded_candidate_never_evaluates_on_the_event_loop(
    policy_dirs: tuple[Path, Path], opa_bin: str, tmp_path: Path
) -> None:
    settings = parse_shadow(
        {"enabled": True, "policies": str(policy_dirs[1]), "opa_binary": opa_bin, "workers": 2},
        tmp_path,
    )
    assert settings is not None

    engine = build_candidate(settings)

    assert isinstance(engine, EmbeddedEngine)
    try:
        assert engine._inline_bytes == 0
        assert engine.identity == f"shadow:{policy_dirs[1]}"
    finally:
        engine.close()


def test_a_candidate_that_does_not_load_or_answer_is_refused_by_its_key(
    tmp_path: Path, opa_bin: str, policy_dirs: tuple[Path, Path]
) -> None:
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.rego").write_text("package gateway.authz\n\ndecision := {\n")

    with pytest.raises(SettingsError, match=r"shadow\.policies: the candidate does not load"):
        build_candidate(ShadowSettings(policies=broken, opa_binary=Path(opa_bin)))
    with pytest.raises(SettingsError, match=r"shadow\.policies: .*gateway/other"):
        build_candidate(
            ShadowSettings(
                policies=policy_dirs[1], opa_binary=Path(opa_bin), decision_path="gateway/other"
            )
        )


def test_an_opa_server_candidate_is_a_rest_engine() -> None:
    engine = build_candidate(ShadowSettings(url="http://127.0.0.1:8282"))

    assert isinstance(engine, OpaRestEngine)
    with pytest.raises(SettingsError, match=r"shadow\.url"):
        build_candidate(ShadowSettings(url="ftp://x"))
