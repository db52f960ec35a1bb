"""Who the chart's NetworkPolicy lets reach the bundled etcd, read from the labels
the operator and Spark really put on pods: the operator's pod and the jobs'
drivers and executors reach its client port, members its peer port, nothing else."""

from __future__ import annotations

import functools
from typing import Any

import pytest

from tests.helm.chart import NAMESPACE, find, render
from tests.helm.job_pod_policy import selector_string
from tests.helm.job_pods import job_driver_pod, spark_executor_pod
from tests.kube_selectors import label_matcher

CLIENT, PEER = 2379, 2380


@functools.cache
def _defaults() -> list[dict[str, Any]]:
    return render()


def _reaches(policy: dict[str, Any], labels: dict[str, str], namespace: str, port: int) -> bool:
    """Whether a pod with `labels` in `namespace` may connect to `port` of the selected pods."""
    for rule in policy["spec"]["ingress"]:
        if port not in [p["port"] for p in rule["ports"]]:
            continue
        for peer in rule["from"]:
            pods = label_matcher(selector_string(peer.get("podSelector", {})))
            if "namespaceSelector" in peer:
                namespaces = label_matcher(selector_string(peer["namespaceSelector"]))
                in_namespace = namespaces({"kubernetes.io/metadata.name": namespace})
            else:
                in_namespace = namespace == policy["metadata"]["namespace"]
            if in_namespace and pods(labels):
                return True
    return False


def _pod_labels(objects: list[dict[str, Any]], kind: str) -> dict[str, str]:
    labels: dict[str, str] = find(objects, kind)[0]["spec"]["template"]["metadata"]["labels"]
    return labels


def test_the_policy_selects_the_etcd_member() -> None:
    objects = _defaults()
    (policy,) = find(objects, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"], "what no rule admits is refused"
    assert label_matcher(selector_string(policy["spec"]["podSelector"]))(_pod_labels(objects, "StatefulSet"))


def test_the_operator_and_the_jobs_pods_reach_etcds_client_port_only() -> None:
    objects = _defaults()
    (policy,) = find(objects, "NetworkPolicy")
    operator = _pod_labels(objects, "Deployment")
    driver = job_driver_pod()["metadata"]["labels"]
    executor = spark_executor_pod()["metadata"]["labels"]
    assert _reaches(policy, operator, NAMESPACE, CLIENT)
    assert _reaches(policy, driver, "streams", CLIENT)
    assert _reaches(policy, executor, "streams", CLIENT)
    for labels, namespace in [(operator, NAMESPACE), (driver, "streams"), (executor, "streams")]:
        assert not _reaches(policy, labels, namespace, PEER), "only members talk raft"
    assert _reaches(policy, _pod_labels(objects, "StatefulSet"), NAMESPACE, PEER)


@pytest.mark.parametrize(
    ("labels", "namespace"),
    [
        ({"app": "web"}, "streams"),
        ({"app": "web"}, NAMESPACE),
        ({"app.kubernetes.io/name": "lockgate", "app.kubernetes.io/instance": "lockgate"}, NAMESPACE),
        ({"app.kubernetes.io/component": "driver"}, "streams"),  # a driver of something else
        (
            {"app.kubernetes.io/managed-by": "lockgate-operator", "app.kubernetes.io/component": "config"},
            "streams",
        ),
    ],
)
def test_other_pods_do_not_reach_etcd(labels: dict[str, str], namespace: str) -> None:
    (policy,) = find(_defaults(), "NetworkPolicy")
    assert not _reaches(policy, labels, namespace, CLIENT)
    assert not _reaches(policy, labels, namespace, PEER)


def test_with_watched_namespaces_only_their_jobs_reach_etcd() -> None:
    (policy,) = find(render({"operator": {"watchNamespaces": ["streams"]}}), "NetworkPolicy")
    driver = job_driver_pod()["metadata"]["labels"]
    assert _reaches(policy, driver, "streams", CLIENT)
    assert not _reaches(policy, driver, "web", CLIENT)
