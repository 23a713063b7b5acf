"""gateway: a policy-as-code authorization gateway for tool calls.

Untrusted callers propose tool calls; ``Contract.prepare`` admits only well-formed ones, a
``Guard`` asks an ``Authorizer`` (Open Policy Agent, in the policy layer) whether each may
run, and only an explicit allow runs the tool.
"""

from gateway._authorization import (
    Authorization,
    AuthorizationError,
    Authorizer,
    AuthorizerFunc,
    Decision,
)
from gateway._call import ToolCall
from gateway._contract import (
    DEFAULT_LIMITS,
    MAX_WRAPPING_DEPTH,
    AdmissionLimits,
    Binding,
    Contract,
    InputValidatingTool,
    InputValidator,
    Invocation,
    Tool,
    WrappingTool,
    bind,
    capability,
)
from gateway._definition import ToolDefinition
from gateway._errors import (
    DuplicateToolError,
    GatewayError,
    InvalidDefinitionError,
    InvalidFailureError,
    InvalidInvocationError,
    InvalidToolCallError,
    InvalidToolError,
    InvalidToolOutputError,
    InvalidWrappingChainError,
    MalformedDecisionError,
    NoDecisionError,
)
from gateway._failure import Failure, FailureKind
from gateway._func import Func, function_tool
from gateway._guard import Guard, run_blocking
from gateway._output import Content, MediaContent, TextContent, ToolOutput
from gateway._registry import Registry

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_WRAPPING_DEPTH",
    "AdmissionLimits",
    "Authorization",
    "AuthorizationError",
    "Authorizer",
    "AuthorizerFunc",
    "Binding",
    "Content",
    "Contract",
    "Decision",
    "DuplicateToolError",
    "Failure",
    "FailureKind",
    "Func",
    "GatewayError",
    "Guard",
    "InputValidatingTool",
    "InputValidator",
    "InvalidDefinitionError",
    "InvalidFailureError",
    "InvalidInvocationError",
    "InvalidToolCallError",
    "InvalidToolError",
    "InvalidToolOutputError",
    "InvalidWrappingChainError",
    "Invocation",
    "MalformedDecisionError",
    "MediaContent",
    "NoDecisionError",
    "Registry",
    "TextContent",
    "Tool",
    "ToolCall",
    "ToolDefinition",
    "ToolOutput",
    "WrappingTool",
    "bind",
    "capability",
    "function_tool",
    "run_blocking",
]
