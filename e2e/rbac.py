"""RBAC on the emulated cluster: the API server's authorizer for Spark's Kubernetes
client, and what the operator's own calls need of the chart's rules.

Clients are told apart by their User-Agent: Spark's fabric8 client, the
operator's (`lockgate-operator`, and kopf's own). The pod runner and the tests
play the kubelet and an admin: their calls are not checked."""

from __future__ import annotations

import functools
from typing import Any

from lockgate.operator.naming import JobNames
from lockgate.operator.owned import role
from lockgate.operator.service import USER_AGENT

from tests.helm.chart import find, render
from tests.kube_emulator import Call

Grants = set[tuple[str, str]]  # (verb, resource)


def _grants(rules: list[dict[str, Any]]) -> Grants:
    return {(verb, resource) for rule in rules for verb in rule["verbs"] for resource in rule["resources"]}


def authorized(call: Call) -> bool:
    """Spark's client may do only what the job's Role grants (the same for every
    job); the operator only what the chart's ClusterRole grants it."""
    if "fabric8" in call.client:
        return (call.verb, call.resource) in _grants(role(JobNames("any", "any"))["rules"])
    if _is_operator(call):
        return (call.verb, call.resource) in chart_operator_grants()
    return True


def _is_operator(call: Call) -> bool:
    return call.client.startswith((USER_AGENT, "kopf/"))


def operator_calls(calls: set[Call]) -> Grants:
    return {(c.verb, c.resource) for c in calls if _is_operator(c)}


@functools.cache
def chart_operator_grants() -> Grants:
    """What the chart's ClusterRole grants the operator (watching every namespace)."""
    (cluster_role,) = find(render(), "ClusterRole")
    return _grants(cluster_role["rules"])
