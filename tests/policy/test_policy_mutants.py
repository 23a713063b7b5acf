"""The Rego unit tests kill representative mutants of the shipped policies.

Each mutant weakens one check of a setting the tests claim to cover (a missing member of
an object setting, a malformed value, a fast path that skips a module) in a copy of
policies/, and the unit test named for that check must then fail. A test that passes on
the mutant tests nothing: in OPA a ``with data.gateway.config.tools.<tool>.<setting> as
{...}`` is merged into the object setting already there, so a test of a missing member
written that way keeps the member (the tests replace object settings whole with
``fx.tools_with``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

POLICIES: Final = Path(__file__).resolve().parents[2] / "policies"


@dataclass(frozen=True)
class Mutant:
    """A one-place change to a policy module and the unit test that must kill it."""

    name: str
    module: str  # below policies/
    original: str  # occurs exactly once in the module
    mutated: str
    killer: str  # data.<package>.<test rule>


MUTANTS: Final = (
    Mutant(
        "an_approval_without_a_valid_ttl_is_accepted",
        "gateway/authz/obligations.rego",
        '\tvalid_ttl(object.get(a, "ttl_s", 900))\n',
        "",
        "data.gateway.authz.obligations_test.test_a_malformed_approval_setting_denies",
    ),
    Mutant(
        "a_redact_setting_with_nothing_to_redact_is_accepted",
        "gateway/authz/obligations.rego",
        '\tcount(object.get(r, "pointers", [])) + count(object.get(r, "patterns", [])) > 0\n',
        "",
        "data.gateway.authz.obligations_test.test_an_empty_redact_setting_denies",
    ),
    Mutant(
        "a_quota_with_extra_members_is_accepted",
        "gateway/authz/flow.rego",
        "\tcount(object.keys(q)) == 3\n",
        "",
        "data.gateway.authz.flow_test.test_malformed_flow_settings_are_misconfigurations",
    ),
    Mutant(
        "the_generic_fast_path_skips_a_redact_setting",
        "gateway/authz/main.rego",
        '\tobject.get(tool, "redact", null) == null\n',
        "",
        "data.gateway.authz.main_test.test_stage_dispatch_generic_tool_with_malformed_redact",
    ),
    Mutant(
        "a_limit_naming_a_non_string_argument_is_accepted",
        "gateway/authz/limits.rego",
        "\tis_string(spec.arg)\n",
        "",
        "data.gateway.authz.limits_test.test_malformed_limits_is_misconfiguration",
    ),
    Mutant(
        "a_resource_kind_that_is_not_an_object_counts_as_configured",
        "gateway/authz/tenancy.rego",
        "resource_kind(kind) if is_object(resources[kind])",
        "resource_kind(kind) if resources[kind]",
        "data.gateway.authz.tenancy_test."
        "test_a_resource_kind_that_is_not_an_object_is_not_configured",
    ),
    Mutant(
        "tool_settings_that_are_not_an_object_count_as_settings",
        "gateway/authz/lib.rego",
        "tool := tools[tool_name] if is_object(tools[tool_name])",
        "tool := tools[tool_name]",
        "data.gateway.authz.rbac_test."
        "test_a_tool_whose_settings_are_not_an_object_is_not_available",
    ),
    Mutant(
        "a_fractional_cache_ttl_is_accepted",
        "gateway/authz/main.rego",
        "\tx == floor(x)\n",
        "",
        "data.gateway.authz.main_test.test_ttl_invalid_values_ignored",
    ),
)


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "policies"
    shutil.copytree(POLICIES, root)
    return root


def _opa_test(opa: str, root: Path, tests: list[str]) -> subprocess.CompletedProcess[str]:
    run = "^(" + "|".join(re.escape(t) for t in tests) + ")$"
    return subprocess.run(
        [opa, "test", str(root), "--timeout", "60s", "--run", run],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_killing_test_exists_and_passes_on_the_shipped_policies(
    opa_binary: str, tmp_path: Path
) -> None:
    killers = sorted({m.killer for m in MUTANTS})
    result = _opa_test(opa_binary, _copy(tmp_path), killers)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"PASS: {len(killers)}/{len(killers)}" in result.stdout, result.stdout


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m.name for m in MUTANTS])
def test_the_policy_unit_tests_fail_on_a_mutant_where(
    opa_binary: str, tmp_path: Path, mutant: Mutant
) -> None:
    root = _copy(tmp_path)
    module = root / mutant.module
    text = module.read_text(encoding="utf-8")
    assert text.count(mutant.original) == 1, f"{mutant.module} changed: update {mutant.name}"
    module.write_text(text.replace(mutant.original, mutant.mutated), encoding="utf-8")
    result = _opa_test(opa_binary, root, [mutant.killer])
    assert result.returncode != 0, f"{mutant.killer} passes on the mutant {mutant.name}"
    # A failing test, not a mutant that does not compile.
    assert f"{mutant.killer}: FAIL" in result.stdout, result.stdout + result.stderr
