"""The lexical URL policy accepts only URLs on whose host every parser agrees.

The ``urls`` module parses URLs itself (policies/README.md says why no parser facts are
needed). That is sound only if every URL it allows means the same scheme, host and port to
a WHATWG parser (``ada-url``, as browsers and many HTTP clients read it) and to RFC 3986
parsers (``urllib3`` under ``requests``, and the standard library), and that host is
allow-listed. This checks it on the corpus and on generated URL-like text.
"""

from __future__ import annotations

import asyncio
import json
import urllib.parse
from pathlib import Path
from typing import Final

import urllib3.util
from ada_url import URL
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway import Authorization
from gateway.policy import PolicyAuthorizer, caller_context
from tests.policy.differential_corpus import EXAMPLE_DEFINITIONS, URLS
from tests.policy.wasm_support import shipped_engine

POLICY_DIR: Final = Path(__file__).resolve().parents[2] / "policies"
ALLOWED_HOSTS: Final = {"api.example.com"}
ALLOWED_DOMAIN: Final = "docs.example.org"

_AUTHORIZER: Final = PolicyAuthorizer(shipped_engine())


def _allowed(url: str) -> bool:
    arguments = json.dumps({"url": url}).encode()
    authorization = Authorization(EXAMPLE_DEFINITIONS["fetch_url"], arguments)

    async def decide() -> bool:
        with caller_context(subject="alice", roles=["reader"], tenant="acme"):
            decision = await _AUTHORIZER.authorize(authorization)
        return decision.allowed

    return asyncio.run(decide())


def _readings(url: str) -> set[tuple[str, str, int]]:
    whatwg = URL(url)
    rfc = urllib3.util.parse_url(url)
    stdlib = urllib.parse.urlsplit(url)
    return {
        (whatwg.protocol.rstrip(":"), whatwg.hostname, int(whatwg.port or 443)),
        ((rfc.scheme or "").lower(), (rfc.host or "").lower(), int(rfc.port or 443)),
        (stdlib.scheme.lower(), (stdlib.hostname or "").lower(), int(stdlib.port or 443)),
    }


def _assert_agreed_and_allow_listed(url: str) -> None:
    readings = _readings(url)
    assert len(readings) == 1, (url, readings)
    ((scheme, host, port),) = readings
    assert scheme == "https"
    assert host in ALLOWED_HOSTS or host == ALLOWED_DOMAIN or host.endswith("." + ALLOWED_DOMAIN)
    assert port in (443, 8443)


def test_every_corpus_url_the_policy_allows_means_one_allowed_host_to_every_parser() -> None:
    allowed = [url for url in URLS if isinstance(url, str) and _allowed(url)]

    assert len(allowed) >= 3
    for url in allowed:
        _assert_agreed_and_allow_listed(url)


PIECES: Final = st.sampled_from(
    [
        "https://",
        "HTTPS://",
        "http://",
        "https:",
        "//",
        "/",
        "\\",
        "api.example.com",
        "docs.example.org",
        "evil.com",
        ".",
        "@",
        ":",
        "443",
        "8443",
        "0443",
        "#",
        "?",
        "%2e",
        "%40",
        "[::1]",
        "127.0.0.1",
        "0x7f",
        "x",
        "-",
        "_",
        "\t",
        " ",
        "a.",
        "API.Example.COM",
        "\u3002",
        "xn--",
    ]
)


@settings(max_examples=150, deadline=None)
@given(
    start=st.sampled_from(["https://api.example.com", "https://docs.example.org", ""]),
    pieces=st.lists(PIECES, max_size=6),
)
def test_generated_urls_the_policy_allows_mean_one_allowed_host_to_every_parser(
    start: str, pieces: list[str]
) -> None:
    url = start + "".join(pieces)
    if _allowed(url):
        _assert_agreed_and_allow_listed(url)
