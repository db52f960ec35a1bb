"""The plots in docs/img are drawn from the benches' numbers: well-formed SVGs. The
latency plot: a p50 and a p99 line through every point, the p99 line above the p50
line. The autoscaling plot: a line through every sample, broken where the job paused
for a rescale, the parallelism as steps, a marker per rescale."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))
from plots import autoscaling_plot, latency_plot

SVG = "{http://www.w3.org/2000/svg}"


def test_the_plot_draws_both_percentiles_through_every_point() -> None:
    points = [(50_000.0, 1.0, 5.0), (150_000.0, 3.0, 40.0), (180_000.0, 90.0, 300.0)]
    root = ET.fromstring(latency_plot(points))
    p99, p50 = (line.attrib["points"].split() for line in root.iter(f"{SVG}polyline"))
    assert len(p99) == len(p50) == len(points)
    for high, low in zip(p99, p50, strict=True):
        assert high.split(",")[0] == low.split(",")[0], "the same throughput"
        assert float(high.split(",")[1]) <= float(low.split(",")[1]), "p99 drawn higher (smaller y)"


def test_the_autoscaling_plot_draws_every_sample_leaves_gaps_where_none_and_marks_each_rescale() -> None:
    rows = [
        (0.0, 10.0, 0, 1),
        (1.0, 60.0, 50, 1),
        (2.0, 60.0, None, None),
        (3.0, 60.0, 20, 4),
        (4.0, 10.0, 0, 4),
    ]
    root = ET.fromstring(autoscaling_plot(rows, [(1.5, 4)], [(1.0, 1), (3.0, 4)]))
    lines = {
        kind: [p.attrib["points"].split() for p in root.iter(f"{SVG}polyline") if p.get("class") == kind]
        for kind in ("offered", "backlog", "parallelism", "flink")
    }
    assert [len(segment) for segment in lines["offered"]] == [5]
    assert [len(segment) for segment in lines["backlog"]] == [2, 2], "no line through the paused sample"
    assert [len(segment) for segment in lines["parallelism"]] == [2, 2]
    assert [len(segment) for segment in lines["flink"]] == [3], "held at 1 until it picks 4: a step"
    assert len([m for m in root.iter(f"{SVG}line") if m.get("class") == "rescale"]) == 1
