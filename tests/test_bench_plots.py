"""The latency plot in docs/img is drawn from the bench's numbers: a well-formed SVG
with a p50 and a p99 line through every point, the p99 line above the p50 line."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from plots import latency_plot

SVG = "{http://www.w3.org/2000/svg}"


def test_the_plot_draws_both_percentiles_through_every_point() -> None:
    points = [(50_000.0, 1.0, 5.0), (150_000.0, 3.0, 40.0), (180_000.0, 90.0, 300.0)]
    root = ET.fromstring(latency_plot(points))
    p99, p50 = (line.attrib["points"].split() for line in root.iter(f"{SVG}polyline"))
    assert len(p99) == len(p50) == len(points)
    for high, low in zip(p99, p50, strict=True):
        assert high.split(",")[0] == low.split(",")[0], "the same throughput"
        assert float(high.split(",")[1]) <= float(low.split(",")[1]), "p99 drawn higher (smaller y)"
