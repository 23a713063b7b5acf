"""The example flow tools the shipped policies configure (data.json): each returns its name."""

from __future__ import annotations

from gateway import function_tool


@function_tool
def read_secret() -> str:
    """Read a secret (labelled reads_secret)."""
    return "read_secret"


@function_tool
def fetch_page() -> str:
    """Fetch a web page (labelled untrusted_content)."""
    return "fetch_page"


@function_tool
def send_email() -> str:
    """Send an email (labelled external_egress)."""
    return "send_email"


@function_tool
def pay_vendor() -> str:
    """Pay a vendor (at most 5 per hour per caller)."""
    return "pay_vendor"


TOOLS = [read_secret, fetch_page, send_email, pay_vendor]
