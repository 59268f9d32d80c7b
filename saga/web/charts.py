"""The overview's chart, drawn on the server as inline SVG (no JavaScript, nothing fetched)."""

from __future__ import annotations

from typing import Any, Final

from markupsafe import Markup, escape

_WIDTH: Final = 720
_HEIGHT: Final = 160
_PAD: Final = 28


def activity_chart(points: list[dict[str, Any]]) -> Markup:
    """Bars: jobs finished per minute; line: the backlog at each minute's end."""
    if not points:
        return Markup("<p>No activity recorded.</p>")
    span = _WIDTH - 2 * _PAD
    step = span / len(points)
    top_done = max(1, *(p["finished"] for p in points))
    top_backlog = max(1, *(p["backlog"] for p in points))
    inner = _HEIGHT - 2 * _PAD
    parts = [
        f'<svg class="chart" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        'aria-label="jobs finished per minute and backlog, last hour">'
    ]
    for index, point in enumerate(points):
        height = inner * point["finished"] / top_done
        x = _PAD + index * step
        parts.append(
            f'<rect class="done" x="{x:.1f}" y="{_PAD + inner - height:.1f}" '
            f'width="{max(step - 1, 1):.1f}" height="{height:.1f}">'
            f"<title>{escape(point['minute'])}: {point['finished']} finished, "
            f"{point['backlog']} waiting</title></rect>"
        )
    line = " ".join(
        f"{_PAD + (i + 0.5) * step:.1f},{_PAD + inner - inner * p['backlog'] / top_backlog:.1f}"
        for i, p in enumerate(points)
    )
    parts.append(f'<polyline class="backlog" points="{line}"/>')
    parts.append(
        f'<text x="{_PAD}" y="{_PAD - 10}">finished per minute (bars, max {top_done}) · '
        f"backlog (line, max {top_backlog})</text>"
    )
    parts.append(
        f'<text x="{_PAD}" y="{_HEIGHT - 8}">{escape(points[0]["minute"][11:16])} UTC</text>'
        f'<text x="{_WIDTH - _PAD}" y="{_HEIGHT - 8}" text-anchor="end">'
        f"{escape(points[-1]['minute'][11:16])} UTC</text>"
    )
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every value above is a number or escaped
