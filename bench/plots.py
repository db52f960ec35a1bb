"""A latency-against-throughput plot as SVG, drawn from a benchmark's own numbers
(no plotting library in the environment; the figure is two polylines on axes)."""

from __future__ import annotations

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
