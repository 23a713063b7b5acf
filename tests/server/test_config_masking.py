"""The audit masking settings: extra name and value patterns load, and a bad one is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.server import ConfigError, parse_config
from tests.server.test_config import at, valid


def test_mask_patterns_and_values_load_in_order(tmp_path: Path) -> None:
    data = at(valid(tmp_path), "audit.mask_patterns", ["(^|_)iban(_|$)", "account_?number"])
    data = at(data, "audit.mask_values", ["ACME-[0-9]{4}"])

    config = parse_config(data, base=tmp_path)

    assert config.audit.mask_patterns == ("(^|_)iban(_|$)", "account_?number")
    assert config.audit.mask_values == ("ACME-[0-9]{4}",)


def test_without_mask_settings_only_the_defaults_apply(tmp_path: Path) -> None:
    config = parse_config(valid(tmp_path), base=tmp_path)

    assert (config.audit.mask_patterns, config.audit.mask_values) == ((), ())


@pytest.mark.parametrize("name", ["mask_patterns", "mask_values"])
@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        pytest.param(["(unclosed"], "is not a regular expression", id="bad-regex"),
        pytest.param("password", "must be a list of strings", id="not-a-list"),
        pytest.param([1], "must be a list of strings", id="not-strings"),
    ],
)
def test_a_bad_mask_setting_is_refused_naming_the_key(
    tmp_path: Path, name: str, value: object, fragment: str
) -> None:
    with pytest.raises(ConfigError, match=f"audit.{name}: .*{fragment}"):
        parse_config(at(valid(tmp_path), f"audit.{name}", value), base=tmp_path)
