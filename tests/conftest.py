"""Shared pytest configuration: hypothesis profiles sized for a 2-core CI machine, and the
``integration`` and ``slow`` markers, set here rather than on each test.

A test is an integration test when it needs a real component: an ``opa`` binary or server,
a child process, a live server on a socket, or the reliability suites. It is marked by where
it lives (:data:`INTEGRATION_DIRS`), by the fixtures it uses (:data:`INTEGRATION_FIXTURES`),
by module for modules whose tests call such helpers directly (:data:`INTEGRATION_MODULES`),
or one by one (:data:`INTEGRATION_TESTS`). Load tests are ``slow`` (:data:`SLOW_TESTS`).
``make test-fast`` runs ``-m "not integration and not slow"`` with fewer hypothesis
examples; ``make check`` runs everything. In the fast suite (``GATEWAY_FAST_SUITE=1``) a
test that starts a process or binds a socket fails, naming this file, so a test cannot be
misfiled quietly.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=100, deadline=None)
# The fast suite tries each property on fewer examples; make check runs the full profiles.
settings.register_profile("fast", max_examples=15, deadline=None)
_FAST_SUITE: Final = os.environ.get("GATEWAY_FAST_SUITE") == "1"
settings.load_profile("fast" if _FAST_SUITE else "ci" if os.environ.get("CI") else "dev")

TESTS: Final = Path(__file__).resolve().parent

#: Folders (below tests/) whose every test is an integration test.
INTEGRATION_DIRS: Final = ("reliability", "replay", "testing", "mcp/real")

#: Fixtures that start or need a real component.
INTEGRATION_FIXTURES: Final = frozenset(
    {
        # an opa binary or a real OPA server
        "opa_binary",
        "opa_bin",
        "opa_server",
        "shared_opa",
        "opa",
        "mask_opa",
        # a live gateway or MCP server on a socket, or a child process
        "start_gateway",
        "gateway",
        "client",
        "undefined_decision_gateway",
        "world",
        "peers",
        "http_gateway",
        "running_http",
        "front",
        "environment",
        "baseline_engine",
        "candidate_engine",
        # a real redis-server
        "redis_server",
        "durable_redis",
    }
)

#: Modules whose tests compile bundles with opa, run processes or serve on sockets
#: through helpers rather than fixtures.
INTEGRATION_MODULES: Final = frozenset(
    {
        "audit/test_durability.py",
        "mcp/test_bridge.py",
        "mcp/test_front.py",
        "mcp/test_passthrough.py",
        "mcp/test_sessions.py",
        "mcp/test_shutdown.py",
        "mcp/test_upstream.py",
        "mcp/test_admission_parity.py",
        "mcp/test_log_canary.py",
        "mcp/test_tracing.py",
        "policy/test_bundle.py",
        "policy/test_differential.py",
        "policy/test_engine_contract.py",
        "policy/test_engine_deadline.py",
        "policy/test_gate.py",
        "policy/test_mask_policy.py",
        "policy/test_path_resolution.py",
        "policy/test_rest.py",
        "policy/test_sql_decisions.py",
        "policy/test_url_agreement.py",
        "policy/test_wasm.py",
        "server/test_cli_serve.py",
        "server/test_embedded_service.py",
        "server/test_http.py",
        "server/test_paths.py",
        "server/test_stack.py",
        "server/test_workers.py",
        "test_cli.py",
        "test_examples.py",
    }
)

#: Single tests, in modules of fast tests, that start a process.
INTEGRATION_TESTS: Final = frozenset(
    {
        "audit/test_writers.py::test_two_processes_on_one_trail_each_append_to_their_own_chain_"
        "and_the_trail_verifies",
        "audit/test_writers.py::test_a_killed_writer_leaves_no_stale_lock_and_its_chain_is_resumed",
        "server/test_config.py::test_every_key_this_repository_publishes_is_on_the_published_list",
    }
)

#: Load and volume tests, and the properties that run hundreds of costly examples whatever
#: the profile (many seconds each): ``slow``, also left out of the fast suite.
SLOW_TESTS: Final = frozenset(
    {
        "audit/test_trail.py::test_ten_thousand_concurrent_calls_leave_ten_thousand_linked_"
        "pairs_in_a_valid_chain",
        "audit/test_verify_robustness.py::test_records_of_any_json_shape_never_raise_and_never_"
        "verify",
        "audit/test_verify_robustness.py::test_any_change_to_a_trail_fails_verification_without_"
        "raising",
        "audit/test_verify_robustness.py::test_random_bytes_as_a_trail_or_head_never_raise",
        "policy/test_sql_facts.py::test_sql_facts_never_raise_on_sql_like_text",
        "test_schema.py::test_compile_refuses_a_document_whose_normalized_form_exceeds_one_"
        "mebibyte",
        "service/test_config_models.py::test_the_loader_refuses_any_generated_document_with_a_"
        "config_error_only",
        "service/test_config_models.py::test_any_value_at_any_key_of_a_valid_config_loads_or_is_"
        "a_config_error",
        "test_contract.py::test_property_a_schema_refusal_never_quotes_an_argument_value_or_"
        "member_name",
        "test_architecture.py::test_every_layer_imports_only_the_layers_its_rules_allow",
    }
)


def _is_integration(item: pytest.Item) -> bool:
    path = Path(str(item.fspath)).resolve()
    try:
        relative = path.relative_to(TESTS).as_posix()
    except ValueError:
        return False
    if relative in INTEGRATION_MODULES or f"{relative}::{item.name}" in INTEGRATION_TESTS:
        return True
    if any(relative.startswith(folder + "/") for folder in INTEGRATION_DIRS):
        return True
    return bool(INTEGRATION_FIXTURES.intersection(getattr(item, "fixturenames", ())))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every integration test ``integration`` (see the module docstring)."""
    for item in items:
        if _is_integration(item):
            item.add_marker(pytest.mark.integration)
        relative = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
        if f"{relative}::{item.name.partition('[')[0]}" in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


class _RealComponentStartedError(RuntimeError):
    """A fast-suite test started a process or bound a socket."""


_guard = {"active": False}


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _guard["active"] and event in ("subprocess.Popen", "socket.bind", "os.posix_spawn"):
        _guard["active"] = False  # report once; the test fails on this exception
        raise _RealComponentStartedError(
            f"a fast-suite test raised {event}: mark it integration in tests/conftest.py"
        )


if _FAST_SUITE:
    sys.addaudithook(_audit)


@pytest.fixture(autouse=True)
def _fast_suite_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the fast suite, a test that is not marked integration starts no real component."""
    _guard["active"] = _FAST_SUITE and request.node.get_closest_marker("integration") is None
    try:
        yield
    finally:
        _guard["active"] = False
