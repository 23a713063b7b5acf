"""Fixtures of the obligation and approval service tests (a real OPA, live servers)."""

from __future__ import annotations

from tests.server.conftest import opa_binary

__all__ = ["opa_binary"]
