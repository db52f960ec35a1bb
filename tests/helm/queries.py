"""The PromQL the chart ships: the dashboard's panel queries and the alert rules."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from tests.helm.chart import CHART, NON_DEFAULT, find, render

_METRIC = re.compile(r"\blockgate_[a-z_]+")


@dataclass(frozen=True)
class Panel:
    title: str
    queries: list[str]


def dashboard() -> dict[str, Any]:
    return dict(json.loads((CHART / "dashboards" / "lockgate.json").read_text()))


def panels(namespace: str = ".*", job: str = ".*", rate_interval: str = "1m") -> list[Panel]:
    """The panels' queries with Grafana's variables filled in as Grafana would."""
    substitutions = {"$namespace": namespace, "$job": job, "$__rate_interval": rate_interval}
    result = []
    for panel in dashboard()["panels"]:
        queries = []
        for target in panel["targets"]:
            expr = target["expr"]
            for variable, value in substitutions.items():
                expr = expr.replace(variable, value)
            queries.append(expr)
        result.append(Panel(panel["title"], queries))
    return result


def alert_rules() -> list[dict[str, Any]]:
    rule = find(render(NON_DEFAULT), "PrometheusRule")[0]
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def metric_names(expressions: list[str]) -> set[str]:
    """The series names the expressions read (`…_total`, a histogram's `…_bucket`)."""
    return {name for e in expressions for name in _METRIC.findall(e)}


def every_query() -> list[str]:
    return [q for p in panels() for q in p.queries] + [r["expr"] for r in alert_rules()]
