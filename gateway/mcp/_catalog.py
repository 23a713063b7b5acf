"""Upstream resources and prompts, each read, subscription and prompt authorized like a call.

A ``resources/read``, ``resources/subscribe`` or ``prompts/get`` reaches an upstream only
through the gateway's call pipeline (admission, the policy decision, the audit trail), as a
call of one of the reserved *action tools* below. They are never listed by ``tools/list`` and
cannot be called with ``tools/call``; no upstream tool may have their names. The policy sees
``input.tool.name`` naming the action and ``input.arguments`` naming the resource or prompt
(the contract "MCP actions, version 1" in ``policies/README.md``):

- ``mcp.resources.read``: ``{"action": "resources/read", "version": 1, "server": S, "uri": U}``
- ``mcp.resources.subscribe``: the same with ``"action": "resources/subscribe"``
- ``mcp.prompts.get``: ``{"action": "prompts/get", "version": 1, "server": S, "prompt": P,
  "arguments": {name: text}}``
- ``mcp.completion.complete``: ``{"action": "completion/complete", "version": 1, "server": S,
  "ref": {"type": "ref/prompt", "name": P} or {"type": "ref/resource", "uri": T},
  "argument": {"name": N, "value": V}, "context": {name: text}}``

``server`` is the configured name of the upstream the gateway routes the request to, and the
action tool does exactly what its admitted arguments say. A denied request never reaches the
upstream. Listing (``resources/list``, ``resources/templates/list``, ``prompts/list``) and
``resources/unsubscribe`` are not decided by the policy: they reveal or change no content.
"""

from __future__ import annotations

import json
from typing import Any, Final

import mcp_types as types

from gateway._contract import Invocation
from gateway._definition import ToolDefinition
from gateway._failure import Failure, FailureKind
from gateway._output import TextContent, ToolOutput
from gateway.mcp._content import ActionOutput
from gateway.mcp._upstream import ACTION_TOOL_NAMES, UpstreamRequestError, UpstreamSet

#: The version of the action contract (``input.arguments.version``).
ACTION_CONTRACT_VERSION: Final = 1
READ: Final = "mcp.resources.read"
SUBSCRIBE: Final = "mcp.resources.subscribe"
GET_PROMPT: Final = "mcp.prompts.get"
COMPLETE: Final = "mcp.completion.complete"
assert {READ, SUBSCRIBE, GET_PROMPT, COMPLETE} == ACTION_TOOL_NAMES  # noqa: S101 - one list
_MAX_URI: Final = 8192


def _resource_schema(action: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "action": {"const": action},
            "version": {"const": ACTION_CONTRACT_VERSION},
            "server": {"type": "string"},
            "uri": {"type": "string", "minLength": 1, "maxLength": _MAX_URI},
        },
        "required": ["action", "version", "server", "uri"],
        "additionalProperties": False,
    }


_PROMPT_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "action": {"const": "prompts/get"},
        "version": {"const": ACTION_CONTRACT_VERSION},
        "server": {"type": "string"},
        "prompt": {"type": "string", "minLength": 1},
        "arguments": {"type": "object", "additionalProperties": {"type": "string"}},
    },
    "required": ["action", "version", "server", "prompt", "arguments"],
    "additionalProperties": False,
}


_TEXT_MAP: Final = {"type": "object", "additionalProperties": {"type": "string"}}
_COMPLETE_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "action": {"const": "completion/complete"},
        "version": {"const": ACTION_CONTRACT_VERSION},
        "server": {"type": "string"},
        "ref": {
            "oneOf": [
                {
                    "type": "object",
                    "properties": {
                        "type": {"const": "ref/prompt"},
                        "name": {"type": "string", "minLength": 1},
                    },
                    "required": ["type", "name"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {
                        "type": {"const": "ref/resource"},
                        "uri": {"type": "string", "minLength": 1, "maxLength": _MAX_URI},
                    },
                    "required": ["type", "uri"],
                    "additionalProperties": False,
                },
            ]
        },
        "argument": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
            "required": ["name", "value"],
            "additionalProperties": False,
        },
        "context": _TEXT_MAP,
    },
    "required": ["action", "version", "server", "ref", "argument", "context"],
    "additionalProperties": False,
}


def _remote_prompt(served: str, prefix: str) -> str:
    # The front routes only prefixed names here; anything else is not this prompt.
    return served[len(prefix) :] if served.startswith(prefix) else ""


class ActionTool:
    """One reserved action tool, forwarding to the upstream its arguments name."""

    __slots__ = ("_definition", "_upstreams")

    def __init__(self, upstreams: UpstreamSet, definition: ToolDefinition) -> None:
        self._upstreams = upstreams
        self._definition = definition

    def definition(self) -> ToolDefinition:
        """The action's definition (what the policy sees as ``input.tool``)."""
        return self._definition

    async def call(self, invocation: Invocation) -> ToolOutput:
        """Forward the admitted request to the upstream it names.

        Raises:
            Failure: ``FAILED`` with an :class:`ActionOutput` naming the upstream's error.
        """
        arguments = json.loads(invocation.arguments)
        try:
            upstream = self._upstreams[arguments["server"]]
        except KeyError:
            raise Failure(
                FailureKind.FAILED,
                ActionOutput((TextContent("unknown upstream server"),), rpc_code=-32602),
                cause=UpstreamRequestError(-32602, "unknown upstream server"),
            ) from None
        try:
            action = arguments["action"]
            if action == "resources/read":
                result: Any = await upstream.read_resource(arguments["uri"])
            elif action == "resources/subscribe":
                await upstream.subscribe(arguments["uri"], on=True)
                result = None
            elif action == "completion/complete":
                ref = arguments["ref"]
                target: types.PromptReference | types.ResourceTemplateReference = (
                    types.PromptReference(name=_remote_prompt(ref["name"], upstream.config.prefix))
                    if ref["type"] == "ref/prompt"
                    else types.ResourceTemplateReference(uri=ref["uri"])
                )
                result = await upstream.complete(
                    target, arguments["argument"], arguments["context"] or None
                )
            else:
                remote = _remote_prompt(arguments["prompt"], upstream.config.prefix)
                result = await upstream.get_prompt(remote, arguments["arguments"])
        except UpstreamRequestError as exc:
            raise Failure(
                FailureKind.FAILED,
                ActionOutput((TextContent(exc.message),), rpc_code=exc.rpc_code),
                cause=exc,
            ) from None
        dumped = (
            {}
            if result is None
            else result.model_dump(mode="json", by_alias=True, exclude_unset=True)
        )
        text = json.dumps(dumped, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        return ActionOutput(result=text.encode("utf-8"))


def action_tools(upstreams: UpstreamSet) -> list[ActionTool]:
    """The action tools over these upstreams."""
    return [
        ActionTool(
            upstreams,
            ToolDefinition(
                READ,
                _resource_schema("resources/read"),
                "Read a resource of an upstream MCP server.",
                imported=True,
            ),
        ),
        ActionTool(
            upstreams,
            ToolDefinition(
                SUBSCRIBE,
                _resource_schema("resources/subscribe"),
                "Subscribe to updates of a resource of an upstream MCP server.",
                imported=True,
            ),
        ),
        ActionTool(
            upstreams,
            ToolDefinition(
                GET_PROMPT,
                _PROMPT_SCHEMA,
                "Get a prompt of an upstream MCP server.",
                imported=True,
            ),
        ),
        ActionTool(
            upstreams,
            ToolDefinition(
                COMPLETE,
                _COMPLETE_SCHEMA,
                "Complete an argument of a prompt or resource template of an upstream MCP server.",
                imported=True,
            ),
        ),
    ]
