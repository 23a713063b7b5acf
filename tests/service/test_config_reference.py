"""The configuration reference: generated from the models, committed as generated."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gateway.service import _config_models as models
from gateway.service.config_reference import main, render

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "configuration.md"


def test_the_committed_reference_is_the_generated_one() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == render(), (
        "docs/configuration.md is out of date: run python -m gateway.service.config_reference"
    )


def _all_keys(model: type[object], path: str) -> list[str]:
    found = []
    for name, (_, kind) in models.keys_of(model).items():
        dotted = f"{path}{name}"
        found.append(dotted)
        if kind.model is not None:
            found += _all_keys(kind.model, f"{dotted}.")
    return found


def test_the_reference_lists_every_key_with_its_full_path() -> None:
    text = render()
    listed = set(re.findall(r"^\| `([a-z0-9_.]+)` \|", text, re.MULTILINE))

    assert listed == set(_all_keys(models.ConfigFile, "")) - set(models.keys_of(models.ConfigFile))


def test_every_key_has_a_meaning() -> None:
    every: set[type[object]] = {models.ConfigFile, *_models(models.ConfigFile)}
    for model in every:
        for name, (spec, _) in models.keys_of(model).items():
            assert str(spec.metadata.get("doc", "")).strip(), (model.__name__, name)


def _models(model: type[object]) -> set[type[object]]:
    found: set[type[object]] = set()
    for _, kind in models.keys_of(model).values():
        if kind.model is not None:
            found |= {kind.model, *_models(kind.model)}
    return found


def test_the_reference_examples_are_valid_toml_with_known_keys() -> None:
    blocks = re.findall(r"```toml\n(.*?)```", render(), re.DOTALL)

    assert len(blocks) >= 3
    for block in blocks:
        data = tomllib.loads(block)
        models.read_table(models.ConfigFile, data)  # unknown keys and wrong types raise


def test_the_check_mode_fails_on_a_stale_file_and_passes_on_a_fresh_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "configuration.md"

    assert main([str(output), "--check"]) == 1
    assert main([str(output)]) == 0
    assert main([str(output), "--check"]) == 0
    output.write_text(output.read_text(encoding="utf-8") + "edited\n", encoding="utf-8")
    assert main([str(output), "--check"]) == 1
    assert "out of date" in capsys.readouterr().out
