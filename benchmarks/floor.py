"""The floor of the HTTP benchmark: a bare Starlette JSON endpoint on the gateway's server stack.

``POST /v1/calls`` reads the JSON body (``json.loads``) and answers a small JSON object,
with nothing of the gateway in between: what uvicorn, Starlette and the event loop cost per
request on this machine. ``benchmarks.wrk`` serves it with ``uvicorn benchmarks.floor:app``
and the same ``--loop``/``--http`` options as ``gateway serve``.
"""

from __future__ import annotations

import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route


async def call(request: Request) -> JSONResponse:
    """Echo the call's id with a fixed answer."""
    document = json.loads(await request.body())
    return JSONResponse({"id": document.get("id"), "status": "ok", "is_error": False})


app = Starlette(routes=[Route("/v1/calls", call, methods=["POST"])])
