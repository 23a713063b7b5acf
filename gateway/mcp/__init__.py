"""MCP: serve the guarded gateway over MCP, and put existing MCP servers behind policy.

- :class:`McpFront` serves a :class:`~gateway.service.Gateway` as an MCP server (stdio or
  streamable HTTP); every ``tools/call`` goes through admission, the policy and the audit
  trail, and every refusal is an ``isError`` tool result with public text only.
- :class:`UpstreamSet` / :class:`Upstream` connect to upstream MCP servers and import
  their tools as :class:`UpstreamTool` s, which the gateway serves behind the policy.
- :class:`McpService` assembles both from a configuration (``gateway mcp --config``).
"""

from gateway.mcp._front import AuthenticatingApp, McpFront, to_call_result
from gateway.mcp._service import McpService, run_mcp
from gateway.mcp._upstream import SkippedTool, Upstream, UpstreamError, UpstreamSet, UpstreamTool
from gateway.service import CALLER_SCOPE_KEY

__all__ = [
    "CALLER_SCOPE_KEY",
    "AuthenticatingApp",
    "McpFront",
    "McpService",
    "SkippedTool",
    "Upstream",
    "UpstreamError",
    "UpstreamSet",
    "UpstreamTool",
    "run_mcp",
    "to_call_result",
]
