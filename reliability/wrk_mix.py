"""The load generator of the load section: ``wrk`` sending the request mix, one answer per line.

``wrk`` (a C load generator, installed by ``scripts/provision-wrk``) runs as its own process,
so the callers cost the service nothing of its interpreter; a Lua script makes every request
of the mix of :mod:`reliability.client` (the same kinds, arguments and credentials) with its
own call id, sent also as ``X-Request-ID``, and writes one line per answer (the request id
the service echoes, the status and the ``status``/``code`` member) to a file per wrk thread.
Latency percentiles are wrk's own, over every request of the measured run.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from reliability.client import KINDS, MIX
from reliability.opa import ROOT

#: How many distinct argument documents each kind cycles through (the client's arguments
#: depend on the request number modulo 50 and 9).
_ARGUMENT_PERIOD: Final = 450
_UNITS: Final = {"us": 1e-3, "ms": 1.0, "s": 1e3}
_KIND_NAMES: Final = tuple(KINDS)


def wrk_binary() -> str:
    """The path of ``wrk`` from ``scripts/provision-wrk``.

    Raises:
        RuntimeError: wrk cannot be provided.
    """
    found = subprocess.run(  # noqa: S603 - the project's own script
        [str(ROOT / "scripts" / "provision-wrk")], capture_output=True, text=True, check=False
    )
    if found.returncode != 0 or not found.stdout.strip():
        raise RuntimeError(f"wrk is required: {found.stderr.strip()}")
    return found.stdout.strip()


def _lua_string(text: str) -> str:
    return "[==[" + text + "]==]"


def script() -> str:
    """The Lua script: the mix of :data:`reliability.client.MIX`, one answer line each."""
    kinds = []
    for index, name in enumerate(_KIND_NAMES, start=1):
        kind = KINDS[name]
        bodies = ", ".join(
            _lua_string(json.dumps(kind.arguments(n), separators=(",", ":")))
            for n in range(_ARGUMENT_PERIOD)
        )
        kinds.append(
            f'  {{index = {index}, key = "{kind.api_key}", tool = "{kind.tool}", '
            f"arguments = {{{bodies}}}}},"
        )
    mix = ", ".join(str(_KIND_NAMES.index(name) + 1) for name in MIX)
    return f"""
local kinds = {{
{chr(10).join(kinds)}
}}
local mix = {{{mix}}}
local period = {_ARGUMENT_PERIOD}
local next_thread = 0

function setup(thread)
  thread:set("tid", next_thread)
  next_thread = next_thread + 1
end

function init(args)
  counter = 0
  prefix = args[2]
  out = io.open(args[1] .. "." .. tid, "w")
  out:setvbuf("line")
end

function request()
  counter = counter + 1
  local kind = kinds[mix[(counter - 1) % #mix + 1]]
  local id = prefix .. "-" .. tid .. "-" .. counter .. "-" .. kind.index
  local arguments = kind.arguments[(counter - 1) % period + 1]
  local body = '{{"id":"' .. id .. '","name":"' .. kind.tool .. '","arguments":'
    .. arguments .. '}}'
  local headers = {{}}
  headers["Content-Type"] = "application/json"
  headers["X-API-Key"] = kind.key
  headers["X-Request-ID"] = id
  return wrk.format("POST", "/v1/calls", headers, body)
end

function response(status, headers, body)
  local id = headers["x-request-id"] or headers["X-Request-ID"] or "?"
  local member = "code"
  if status == 200 then member = "status" end
  local code = string.match(body, '"' .. member .. '":"([^"]*)"') or "<not json>"
  out:write(id, " ", status, " ", code, "\\n")
end
"""


@dataclass(frozen=True, slots=True)
class Answer:
    """One answered request: its call id, kind, status and code."""

    call_id: str
    kind: str
    status: int
    code: str


@dataclass(frozen=True, slots=True)
class WrkRun:
    """One wrk run: the answers, wrk's counts and its latency percentiles (ms)."""

    answers: list[Answer]
    requests: int
    seconds: float
    requests_per_s: float
    percentiles_ms: dict[str, float]
    socket_errors: str | None


def run(url: str, *, prefix: str, connections: int, seconds: float, folder: Path) -> WrkRun:
    """Drive the mix at ``url`` for ``seconds`` with ``connections`` connections.

    Raises:
        RuntimeError: wrk failed or printed what it was not expected to.
    """
    lua = folder / "mix.lua"
    lua.write_text(script(), encoding="utf-8")
    out = folder / f"answers-{prefix}"
    duration = max(1, round(seconds))
    completed = subprocess.run(  # noqa: S603 - argv list, no shell
        [
            wrk_binary(),
            "-t1",
            f"-c{connections}",
            f"-d{duration}s",
            "--latency",
            "-s",
            str(lua),
            url,
            "--",
            str(out),
            prefix,
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=duration + 60,
    )
    text = completed.stdout
    rate = re.search(r"Requests/sec:\s+([0-9.]+)", text)
    total = re.search(r"(\d+) requests in ([0-9.]+)(ms|s|m)", text)
    found = dict(re.findall(r"^\s+(50|75|90|99)%\s+([0-9.]+)(?:us|ms|s)", text, re.MULTILINE))
    units = dict(re.findall(r"^\s+(50|75|90|99)%\s+[0-9.]+(us|ms|s)", text, re.MULTILINE))
    if completed.returncode != 0 or rate is None or total is None or len(found) != 4:
        raise RuntimeError(f"wrk failed: {completed.stderr.strip()}\n{text}")
    errors = re.search(r"Socket errors: (.*)", text)
    answers = []
    for file in sorted(folder.glob(f"answers-{prefix}.*")):
        for line in file.read_text(encoding="utf-8").splitlines():
            call_id, status, code = line.split(" ", 2)
            kind = _KIND_NAMES[int(call_id.rsplit("-", 1)[1]) - 1] if call_id != "?" else "?"
            answers.append(Answer(call_id, kind, int(status), code))
    scale = {"ms": 1e-3, "s": 1.0, "m": 60.0}[total[3]]
    return WrkRun(
        answers=answers,
        requests=int(total[1]),
        seconds=float(total[2]) * scale,
        requests_per_s=float(rate[1]),
        percentiles_ms={key: float(value) * _UNITS[units[key]] for key, value in found.items()},
        socket_errors=errors[1].strip() if errors else None,
    )


def as_samples(wrk_run: WrkRun, *, measured: bool) -> list[list[Any]]:
    """The answers as the rows of :class:`reliability.load.Sample` (no per-request times)."""
    return [
        [answer.call_id, answer.kind, 0.0, 0.0, answer.status, answer.code, measured]
        for answer in wrk_run.answers
    ]
