"""Path arguments are decided on where they lead, where the gateway sees the tool's files.

A real folder tree with real symbolic links stands for a filesystem shared by tenants (as
one filesystem MCP server over all of them would see it). Every case runs through the real
:class:`PolicyAuthorizer` and :class:`InputDocument` on the embedded engine and on a real
OPA server, both loading the shipped policies, with the example ``read_file`` tool and a
:class:`PathView` that maps the tools' ``/srv`` to the tree.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway import Authorization
from gateway.policy import (
    CallerContext,
    EmbeddedEngine,
    InputDocument,
    PathView,
)
from gateway.testing import OpaServer
from tests.policy.differential_corpus import EXAMPLE_DEFINITIONS, context
from tests.policy.wasm_support import decide_on_both_engines, shipped_engine, shipped_opa_server

POLICY_DIR: Final = Path(__file__).resolve().parents[2] / "policies"
READER: Final = CallerContext(context(("reader",)))
WRITER: Final = CallerContext(context(("writer",)))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``/srv`` as the tools see it: two tenants and a shared folder, with links."""
    root = tmp_path_factory.mktemp("srv")
    acme = root / "tenants" / "acme"
    globex = root / "tenants" / "globex"
    shared = root / "shared"
    for folder in (acme / "sub", globex, shared):
        folder.mkdir(parents=True)
    (acme / "report.txt").write_text("acme")
    (globex / "pay.csv").write_text("globex")
    (shared / "handbook.txt").write_text("shared")
    (acme / "to-globex").symlink_to(globex)  # absolute link to another tenant
    (acme / "sub" / "up").symlink_to("../../globex")  # relative link climbing out
    (acme / "pay.csv").symlink_to(globex / "pay.csv")  # a file link
    (acme / "to-shared").symlink_to(shared)
    (acme / "to-etc").symlink_to("/etc")  # outside the tools' filesystem
    (acme / "loop-a").symlink_to(acme / "loop-b")
    (acme / "loop-b").symlink_to(acme / "loop-a")
    (acme / "via-self").symlink_to(".")  # harmless: stays in the tenant
    return root


@pytest.fixture(scope="module")
def view(tree: Path) -> PathView:
    return PathView({"read_file": ["/path"], "write_file": ["/path"]}, mounts={"/srv": str(tree)})


@pytest.fixture(scope="module")
def sources() -> Iterator[EmbeddedEngine]:
    with shipped_engine(timeout_s=30.0) as engine:
        yield engine


@pytest.fixture(scope="module")
def opa(opa_binary: str) -> Iterator[OpaServer]:
    with shipped_opa_server(opa_binary) as server:
        yield server


async def _decide_both(
    sources: EmbeddedEngine,
    server: OpaServer,
    view: PathView | None,
    *,
    tool: str,
    arguments: dict[str, str],
    ctx: CallerContext,
) -> list[tuple[bool, str | None]]:
    authorization = Authorization(EXAMPLE_DEFINITIONS[tool], json.dumps(arguments).encode())
    return await decide_on_both_engines(sources, server, authorization, ctx, path_view=view)


#: Reads that look confined by their text but lead elsewhere, or cannot be resolved.
ESCAPES: Final[dict[str, str]] = {
    "dir-link-to-other-tenant": "/srv/tenants/acme/to-globex/pay.csv",
    "relative-link-climbing-out": "/srv/tenants/acme/sub/up/pay.csv",
    "file-link-to-other-tenant": "/srv/tenants/acme/pay.csv",
    "link-out-of-the-filesystem": "/srv/tenants/acme/to-etc/passwd",
    "link-loop": "/srv/tenants/acme/loop-a/x",
}

#: Reads that stay inside the caller's roots once resolved.
CONFINED: Final[dict[str, str]] = {
    "plain-file": "/srv/tenants/acme/report.txt",
    "not-yet-existing": "/srv/tenants/acme/new.txt",
    "link-into-shared": "/srv/tenants/acme/to-shared/handbook.txt",
    "link-to-itself": "/srv/tenants/acme/via-self/report.txt",
}


@pytest.mark.parametrize("path", ESCAPES.values(), ids=ESCAPES.keys())
def test_a_path_leading_out_of_the_roots_is_denied_on_both_engines(
    sources: EmbeddedEngine, opa: OpaServer, view: PathView, path: str
) -> None:
    outcomes = asyncio.run(
        _decide_both(sources, opa, view, tool="read_file", arguments={"path": path}, ctx=READER)
    )
    assert outcomes[0] == outcomes[1], "the engines disagree"
    assert outcomes[0][0] is False
    assert outcomes[0][1] in {
        "path is not allowed: it leads outside the allowed directories",
        "path is not allowed: it cannot be resolved",
    }


@pytest.mark.parametrize("path", ESCAPES.values(), ids=ESCAPES.keys())
def test_without_a_view_the_text_alone_is_checked(
    sources: EmbeddedEngine, opa: OpaServer, path: str
) -> None:
    # What the view adds: the same paths pass a check of their text.
    outcomes = asyncio.run(
        _decide_both(sources, opa, None, tool="read_file", arguments={"path": path}, ctx=READER)
    )
    assert outcomes == [(True, "the call is authorized")] * 2


@pytest.mark.parametrize("path", CONFINED.values(), ids=CONFINED.keys())
def test_a_path_resolving_inside_the_roots_is_allowed_on_both_engines(
    sources: EmbeddedEngine, opa: OpaServer, view: PathView, path: str
) -> None:
    outcomes = asyncio.run(
        _decide_both(sources, opa, view, tool="read_file", arguments={"path": path}, ctx=READER)
    )
    assert outcomes == [(True, "the call is authorized")] * 2


def test_a_write_through_a_link_into_shared_is_denied(
    sources: EmbeddedEngine, opa: OpaServer, view: PathView
) -> None:
    # Reads may use /srv/shared/, writes may not, and the link does not change that.
    arguments = {"path": "/srv/tenants/acme/to-shared/handbook.txt", "content": "x"}
    outcomes = asyncio.run(
        _decide_both(sources, opa, view, tool="write_file", arguments=arguments, ctx=WRITER)
    )
    assert (
        outcomes == [(False, "path is not allowed: it leads outside the allowed directories")] * 2
    )


def test_the_facts_follow_the_filesystem_on_every_call(tree: Path, view: PathView) -> None:
    link = tree / "tenants" / "acme" / "moving"
    authorization = Authorization(
        EXAMPLE_DEFINITIONS["read_file"], b'{"path": "/srv/tenants/acme/moving/x"}'
    )
    link.symlink_to(tree / "tenants" / "acme" / "sub")
    try:
        first = InputDocument(authorization, CallerContext({}), path_view=view)
        first_digest = first.digest  # the decision is made on the facts of this moment
        link.unlink()
        link.symlink_to(tree / "tenants" / "globex")
        second = InputDocument(authorization, CallerContext({}), path_view=view)
        second_digest = second.digest
    finally:
        link.unlink()
    assert json.loads(first.facts_json)["arguments"]["/path"]["path"]["resolved"] == (
        "/srv/tenants/acme/sub/x"
    )
    assert json.loads(second.facts_json)["arguments"]["/path"]["path"]["resolved"] == (
        "/srv/tenants/globex/x"
    )
    # The cache key changes with where the path leads.
    assert first_digest != second_digest


def test_a_tool_the_view_does_not_cover_gets_no_path_facts(view: PathView) -> None:
    authorization = Authorization(EXAMPLE_DEFINITIONS["fetch_url"], b'{"url": "https://x"}')
    document = InputDocument(authorization, CallerContext({}), path_view=view)
    assert json.loads(document.facts_json) == {"arguments": {}, "version": 1}


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("relative/path", "not_absolute"),
        (7, "not_absolute"),
        ("/srv/a\0b", "invalid"),
        ("/srv/" + "a" * 5000, "invalid"),
        ("/etc/passwd", "outside_view"),
        ("/srvx/a", "outside_view"),
    ],
)
def test_an_unresolvable_value_says_why_without_quoting_it(
    view: PathView, value: object, error: str
) -> None:
    assert view.resolve(value) == {"resolved": None, "error": error}


@given(st.text(max_size=300))
def test_resolving_any_text_never_raises_and_stays_in_the_view(view: PathView, text: str) -> None:
    facts = view.resolve("/srv/tenants/acme/" + text)
    resolved = facts["resolved"]
    assert resolved is None or resolved == "/srv" or resolved.startswith("/srv/")


def test_mounts_must_be_absolute() -> None:
    with pytest.raises(ValueError, match="absolute"):
        PathView({}, mounts={"srv": "/x"})
    with pytest.raises(ValueError, match="pointer"):
        PathView({"t": ["path"]})


def test_without_mounts_paths_resolve_where_they_are(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    facts = PathView({"t": ["/p"]}).facts("t", {"p": f"{tmp_path}/link/f"})
    assert facts == {"/p": {"path": {"resolved": f"{os.path.realpath(real)}/f", "exists": False}}}
