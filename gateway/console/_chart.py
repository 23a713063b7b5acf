"""An inline SVG chart of decisions over time by outcome (server-rendered, no script).

Presentation attributes only (no ``style`` attribute: the CSP allows no inline style). Every
text in it is escaped.
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from html import escape
from typing import Final, Protocol

BUCKETS: Final = 24
_COLOURS: Final = {"allow": "#2e7d32", "deny": "#b71c1c", "error": "#e65100"}
_WIDTH: Final = 720
_HEIGHT: Final = 180
_LEFT: Final = 40
_BOTTOM: Final = 30


class _Timed(Protocol):
    @property
    def moment(self) -> datetime.datetime | None: ...

    @property
    def result(self) -> str: ...


def decisions_chart(decisions: Sequence[_Timed]) -> str:
    """Stacked bars of decisions by outcome over the time they span ('' when none)."""
    timed = [d for d in decisions if d.moment is not None and d.result in _COLOURS]
    if not timed:
        return ""
    first = min(d.moment for d in timed if d.moment is not None)
    last = max(d.moment for d in timed if d.moment is not None)
    span = max((last - first).total_seconds(), 1.0)
    step = span / BUCKETS
    counts = [dict.fromkeys(_COLOURS, 0) for _ in range(BUCKETS)]
    for d in timed:
        assert d.moment is not None  # noqa: S101 - filtered above
        index = min(int((d.moment - first).total_seconds() / step), BUCKETS - 1)
        counts[index][d.result] += 1
    peak = max(sum(c.values()) for c in counts) or 1
    plot_w, plot_h = _WIDTH - _LEFT - 10, _HEIGHT - _BOTTOM - 10
    bar_w = plot_w / BUCKETS
    parts = [
        f'<svg class="chart" role="img" aria-labelledby="chart-title" viewBox="0 0 {_WIDTH} '
        f'{_HEIGHT}" width="{_WIDTH}" height="{_HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<title id="chart-title">Decisions over time by outcome, {len(timed)} decisions from '
        f"{escape(first.isoformat(timespec='minutes'))} to "
        f"{escape(last.isoformat(timespec='minutes'))}</title>",
        f'<line x1="{_LEFT}" y1="{10 + plot_h}" x2="{_WIDTH - 10}" y2="{10 + plot_h}" '
        'stroke="#555" stroke-width="1"/>',
        f'<text x="{_LEFT - 6}" y="16" text-anchor="end" font-size="11" fill="#333">{peak}</text>',
        f'<text x="{_LEFT - 6}" y="{10 + plot_h}" text-anchor="end" font-size="11" '
        'fill="#333">0</text>',
    ]
    for index, bucket in enumerate(counts):
        y = float(10 + plot_h)
        for result, colour in _COLOURS.items():
            n = bucket[result]
            if not n:
                continue
            h = plot_h * n / peak
            y -= h
            x = _LEFT + index * bar_w + 1
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar_w - 2:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{n} {result}</title></rect>'
            )
    labels = ((first, "start"), (last, "end"))
    for moment, anchor in labels:
        x = _LEFT if anchor == "start" else _WIDTH - 10
        parts.append(
            f'<text x="{x}" y="{_HEIGHT - 8}" text-anchor="{anchor}" font-size="11" '
            f'fill="#333">{escape(moment.strftime("%Y-%m-%d %H:%M"))}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
