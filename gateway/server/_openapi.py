"""The OpenAPI 3.1 description of the HTTP API."""

from __future__ import annotations

from typing import Any

from gateway.service import ERRORS, TOOL_RESULTS, ResultCode

_ERROR = {
    "type": "object",
    "required": ["code", "message"],
    "properties": {
        "code": {"type": "string", "enum": [code.value for code in ERRORS]},
        "message": {"type": "string"},
        "decision_id": {"type": ["string", "null"]},
        "request_id": {"type": "string"},
    },
}


def _error(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }


def openapi_document() -> dict[str, Any]:
    """The OpenAPI document served at ``/openapi.json``."""
    security: list[dict[str, list[str]]] = [{"apiKey": []}, {"bearer": []}]
    return {
        "openapi": "3.1.0",
        "info": {"title": "gateway", "version": "1", "description": "Policy-guarded tool calls."},
        "components": {
            "securitySchemes": {
                "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"},
            },
            "schemas": {
                "Error": _ERROR,
                "Call": {
                    "type": "object",
                    "required": ["id", "name"],
                    "additionalProperties": False,
                    "properties": {
                        "id": {"type": "string", "minLength": 1},
                        "name": {"type": "string", "minLength": 1},
                        "arguments": {"oneOf": [{"type": "object"}, {"type": "string"}]},
                    },
                },
                "Output": {
                    "type": "object",
                    "properties": {
                        "content": {"type": "array", "items": {"type": "object"}},
                        "details": {},
                        "text": {"type": ["string", "null"]},
                    },
                },
                "Result": {
                    "type": "object",
                    "required": ["id", "status", "is_error"],
                    "properties": {
                        "id": {"type": "string"},
                        "status": {
                            "type": "string",
                            "enum": [code.value for code in ResultCode if code in TOOL_RESULTS],
                        },
                        "is_error": {"type": "boolean"},
                        "output": {"$ref": "#/components/schemas/Output"},
                        "decision_id": {"type": ["string", "null"]},
                        "request_id": {"type": "string"},
                    },
                },
            },
        },
        "paths": {
            "/v1/tools": {
                "get": {
                    "summary": "The tools this caller may call",
                    "security": security,
                    "responses": {
                        "200": {"description": "Tool definitions"},
                        "401": _error("Unauthenticated"),
                    },
                }
            },
            "/v1/calls": {
                "post": {
                    "summary": "Call a tool through admission, policy and audit",
                    "security": security,
                    "parameters": [
                        {
                            "name": "X-Request-ID",
                            "in": "header",
                            "required": False,
                            "schema": {"type": "string"},
                        }
                    ],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Call"}}
                        },
                    },
                    "responses": {
                        "200": {
                            "description": "The tool ran (is_error marks the tool's own failure)",
                            "content": {
                                "application/json": {
                                    "schema": {"$ref": "#/components/schemas/Result"}
                                }
                            },
                        },
                        "202": _error(
                            "The call awaits approval (approval_id, approval_url): not run"
                        ),
                        "400": _error("Malformed request or invalid arguments"),
                        "401": _error("Unauthenticated"),
                        "403": _error("Denied by policy (public message only)"),
                        "404": _error("Unknown tool"),
                        "405": _error("The path does not take that method"),
                        "413": _error("Body too large"),
                        "415": _error("The body is not sent as JSON"),
                        "500": _error("The tool raised an unexpected error"),
                        "502": _error("The tool ran; its output could not be redacted"),
                        "503": _error(
                            "No policy decision, or the audit trail could not be written"
                        ),
                    },
                }
            },
            "/healthz": {
                "get": {"summary": "Liveness", "responses": {"200": {"description": "alive"}}}
            },
            "/readyz": {
                "get": {
                    "summary": "Readiness: policies loaded and engine reachable",
                    "responses": {
                        "200": {"description": "ready"},
                        "503": {"description": "not ready"},
                    },
                }
            },
            "/metrics": {
                "get": {
                    "summary": "Prometheus metrics",
                    "responses": {"200": {"description": "text"}},
                }
            },
        },
    }
