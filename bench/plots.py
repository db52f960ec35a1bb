"""A latency-against-throughput plot as SVG, drawn from a benchmark's own numbers
(no plotting library in the environment; the figure is two polylines on axes)."""

from __future__ import annotations

import math

WIDTH, HEIGHT, MARGIN = 640, 400, 60


def latency_plot(points: list[tuple[float, float, float]]) -> str:
    """`points`: (records/s, p50 ms, p99 ms), in order of throughput."""
    top_rate = max(rate for rate, _, _ in points) * 1.05
    top_ms = max(p99 for _, _, p99 in points) * 1.1

    def x(rate: float) -> float:
        return MARGIN + rate / top_rate * (WIDTH - 2 * MARGIN)

    def y(ms: float) -> float:
        return HEIGHT - MARGIN - ms / top_ms * (HEIGHT - 2 * MARGIN)

    def line(values: list[tuple[float, float]], colour: str) -> str:
        path = " ".join(f"{x(rate):.1f},{y(ms):.1f}" for rate, ms in values)
        dots = "".join(f'<circle cx="{x(r):.1f}" cy="{y(m):.1f}" r="3" fill="{colour}"/>' for r, m in values)
        return f'<polyline points="{path}" fill="none" stroke="{colour}" stroke-width="2"/>{dots}'

    ticks = []
    for i in range(6):
        rate, ms = top_rate * i / 5, top_ms * i / 5
        ticks.append(
            f'<text x="{x(rate):.1f}" y="{HEIGHT - MARGIN + 18}" text-anchor="middle">'
            f"{rate / 1000:.0f}k</text>"
            f'<text x="{MARGIN - 8}" y="{y(ms) + 4:.1f}" text-anchor="end">{ms:.0f}</text>'
        )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        'font-family="sans-serif" font-size="12">'
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>'
        f'<line x1="{MARGIN}" y1="{HEIGHT - MARGIN}" x2="{WIDTH - MARGIN}" y2="{HEIGHT - MARGIN}" '
        'stroke="black"/>'
        f'<line x1="{MARGIN}" y1="{MARGIN}" x2="{MARGIN}" y2="{HEIGHT - MARGIN}" stroke="black"/>'
        + "".join(ticks)
        + f'<text x="{WIDTH / 2}" y="{HEIGHT - 15}" text-anchor="middle">records/s</text>'
        f'<text x="15" y="{HEIGHT / 2}" transform="rotate(-90 15 {HEIGHT / 2})" text-anchor="middle">'
        "source-to-sink latency (ms)</text>"
        + line([(rate, p99) for rate, _, p99 in points], "#c0392b")
        + line([(rate, p50) for rate, p50, _ in points], "#2471a3")
        + f'<text x="{WIDTH - MARGIN}" y="{MARGIN - 20}" text-anchor="end" fill="#c0392b">p99</text>'
        f'<text x="{WIDTH - MARGIN}" y="{MARGIN - 5}" text-anchor="end" fill="#2471a3">p50</text>'
        "</svg>\n"
    )


PANEL_HEIGHT, GAP = 130, 30
PARALLELISM, FLINK = "#1e1e1e", "#e67e22"


def autoscaling_plot(
    rows: list[tuple[float, float, float | None, int | None]],
    rescales: list[tuple[float, int]],
    flink: list[tuple[float, int | None]],
) -> str:
    """Three panels against time: the offered rate, the backlog, and the running
    parallelism beside the one Flink's algorithm would pick; a dashed line at each
    rescale. `rows`: (seconds, records/s offered, backlog or None, parallelism or
    None: paused); `rescales`: (seconds, new parallelism); `flink`: (seconds,
    parallelism or None: no decision)."""
    end = max(t for t, *_ in rows)
    height = MARGIN + 3 * PANEL_HEIGHT + 2 * GAP + MARGIN

    def x(t: float) -> float:
        return MARGIN + t / end * (WIDTH - 2 * MARGIN)

    def panel(
        index: int, label: str, top: float, series: list[tuple[str, list[list[tuple[float, float]]]]]
    ) -> str:
        bottom = MARGIN + (index + 1) * PANEL_HEIGHT + index * GAP

        def y(value: float) -> float:
            return bottom - value / top * PANEL_HEIGHT

        parts = [
            f'<line x1="{MARGIN}" y1="{bottom}" x2="{WIDTH - MARGIN}" y2="{bottom}" stroke="black"/>',
            f'<line x1="{MARGIN}" y1="{bottom - PANEL_HEIGHT}" x2="{MARGIN}" y2="{bottom}" stroke="black"/>',
            f'<text x="{MARGIN + 6}" y="{bottom - PANEL_HEIGHT + 12}">{label}</text>',
        ]
        for i in range(3):
            value = top * i / 2
            parts.append(
                f'<text x="{MARGIN - 8}" y="{y(value) + 4:.1f}" text-anchor="end">{value:.0f}</text>'
            )
        for style, segments in series:
            for segment in segments:
                path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in segment)
                parts.append(f'<polyline points="{path}" fill="none" {style}/>')
        return "".join(parts)

    offered = [(t, rate) for t, rate, _, _ in rows]
    backlog = _segments([(t, b) for t, _, b, _ in rows])
    running = _segments([(t, p) for t, _, _, p in rows], steps=True)
    picked = _segments(flink, steps=True)
    top_rate = _round_up(max(rate for _, rate in offered) * 1.1)
    top_backlog = _round_up(max((b for s in backlog for _, b in s), default=1.0) * 1.1)
    top_parallelism = _round_up(max(p for s in running + picked for _, p in s) + 1)
    markers = "".join(
        f'<line class="rescale" x1="{x(t):.1f}" y1="{MARGIN - 10}" x2="{x(t):.1f}" y2="{height - MARGIN}" '
        f'stroke="grey" stroke-dasharray="4 3"/>'
        f'<text x="{x(t) + 3:.1f}" y="{MARGIN - 12}" fill="grey">P={p}</text>'
        for t, p in rescales
    )
    ticks = "".join(
        f'<text x="{x(t):.1f}" y="{height - MARGIN + 18}" text-anchor="middle">{t:.0f}</text>'
        for t in range(0, int(end) + 1, next(s for s in (5, 10, 15, 20, 30, 60, 120, 300) if end / s <= 8))
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        'font-family="sans-serif" font-size="12">'
        f'<rect width="{WIDTH}" height="{height}" fill="white"/>'
        + panel(
            0,
            "offered (records/s)",
            top_rate,
            [('class="offered" stroke="#2471a3" stroke-width="2"', [offered])],
        )
        + panel(
            1,
            "backlog (records)",
            top_backlog,
            [('class="backlog" stroke="#c0392b" stroke-width="2"', backlog)],
        )
        + panel(
            2,
            "parallelism",
            top_parallelism,
            [
                (f'class="parallelism" stroke="{PARALLELISM}" stroke-width="3"', running),
                (f'class="flink" stroke="{FLINK}" stroke-width="1.5" stroke-dasharray="5 3"', picked),
            ],
        )
        + markers
        + ticks
        + f'<text x="{WIDTH / 2}" y="{height - 15}" text-anchor="middle">seconds</text>'
        f'<text x="{WIDTH - MARGIN}" y="{height - MARGIN - PANEL_HEIGHT + 12}" text-anchor="end">'
        f'<tspan fill="{PARALLELISM}">running</tspan> · '
        f'<tspan fill="{FLINK}">Flink\'s algorithm would pick</tspan></text>'
        "</svg>\n"
    )


def _segments(
    points: list[tuple[float, float | None]] | list[tuple[float, int | None]], *, steps: bool = False
) -> list[list[tuple[float, float]]]:
    """The runs of points with a value (a gap where there is none); as steps: each
    value held until the next point."""
    segments: list[list[tuple[float, float]]] = []
    current: list[tuple[float, float]] = []
    for t, value in points:
        if value is None:
            if current:
                segments.append(current)
            current = []
            continue
        if steps and current and current[-1][1] != value:
            current.append((t, current[-1][1]))
        current.append((t, float(value)))
    if current:
        segments.append(current)
    return segments


def _round_up(value: float) -> float:
    """`value` rounded up to an even multiple of its order of magnitude (72 -> 80,
    117 -> 200, 9 -> 10): axis ticks at 0, half and the top read as round numbers."""
    if value <= 0:
        return 1.0
    step = 2 * 10 ** math.floor(math.log10(value))
    return math.ceil(value / step) * step if value > step / 2 else step / 2
