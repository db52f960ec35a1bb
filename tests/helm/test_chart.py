"""The chart, linted and rendered by Helm's own code for the default values and
a non-default set; every object a valid Kubernetes object."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml
from lockgate.operator.command import register as register_operator_command
from lockgate.operator.naming import JobNames
from lockgate.operator.owned import role

from tests.helm.chart import CHART, NAMESPACE, NON_DEFAULT, REPO, find, operator_args, render
from tests.operator.test_crd import KUBERNETES

PROMETHEUS_OPERATOR_KINDS = {"PodMonitor", "PrometheusRule"}


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["defaults", "external-etcd-tls-monitoring"])
def test_the_chart_lints_clean(values: dict[str, Any] | None) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBERNETES}")
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert report["errors"] == []
    assert problems == []


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["defaults", "external-etcd-tls-monitoring"])
def test_every_rendered_object_is_valid(values: dict[str, Any] | None) -> None:
    objects = render(values)
    peering_crds = {c["spec"]["names"]["kind"]: c for c in _chart_crds() if c["spec"]["group"] == "kopf.dev"}
    for obj in objects:
        if obj["kind"] in PROMETHEUS_OPERATOR_KINDS:
            continue  # their CRDs are the Prometheus Operator's; test_monitoring checks these
        if obj["kind"] in peering_crds:
            schema = peering_crds[obj["kind"]]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
            jsonschema.validate(obj, schema)
            continue
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)


def _chart_crds() -> list[dict[str, Any]]:
    return [
        doc
        for crd in helm.Chart.load(CHART).crds
        for doc in yaml.safe_load_all(crd["data"])
        if doc is not None
    ]


def test_the_charts_crd_is_the_repositorys() -> None:
    crds = {c["name"]: c["data"] for c in helm.Chart.load(CHART).crds}
    assert crds["crds/streamingjob.yaml"] == (REPO / "crds" / "streamingjob.yaml").read_text()
    for crd in _chart_crds():
        kubernetes_validate.validate(crd, KUBERNETES, strict=True)


def _parse_operator_args(args: list[str]) -> argparse.Namespace:
    """The Deployment's arguments, parsed by `lockgate operator`'s own parser."""
    assert args[:2] == ["lockgate", "operator"]
    parser = argparse.ArgumentParser(prog="lockgate")
    register_operator_command(parser.add_subparsers())
    return parser.parse_args(args[1:])


def test_by_default_one_operator_watches_every_namespace_with_its_own_etcd() -> None:
    objects = render()
    options = _parse_operator_args(operator_args(objects))
    assert options.all_namespaces
    assert options.etcd == f"https://lockgate-etcd.{NAMESPACE}.svc:2379"
    assert options.peering is None, "one replica: no peering"
    assert not options.allow_privileged_pods, "jobs get restricted pods unless the admin says otherwise"
    assert not options.allow_custom_storage_roots
    assert not options.allow_unrestricted_namespaces, "jobs run only in namespaces enforcing restricted"
    assert options.etcd_tls_secret == "lockgate-etcd-client", "the generated client certificate"
    assert (options.etcd_user, options.etcd_enable_auth) == ("root", True), "the operator turns etcd auth on"
    statefulset = find(objects, "StatefulSet")[0]
    assert statefulset["spec"]["serviceName"] == "lockgate-etcd"
    assert find(objects, "ClusterRole")
    assert find(objects, "ClusterRoleBinding")
    assert find(objects, "PodMonitor") == [], "auto: no Prometheus Operator API offline"
    assert find(objects, "PrometheusRule") == []
    assert find(objects, "ConfigMap", "lockgate-dashboard"), "the Grafana dashboard"
    pod = find(objects, "Deployment")[0]["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True


def test_external_etcd_with_tls_and_named_namespaces() -> None:
    objects = render(NON_DEFAULT)
    options = _parse_operator_args(operator_args(objects))
    assert options.namespace == ["streams", "batch"]
    assert options.etcd == "https://etcd-0.etcd:2379,https://etcd-1.etcd:2379"
    assert (options.etcd_ca, options.etcd_cert, options.etcd_key) == (
        "/etc/lockgate-etcd-tls/ca.crt",
        "/etc/lockgate-etcd-tls/tls.crt",
        "/etc/lockgate-etcd-tls/tls.key",
    )
    assert options.etcd_tls_secret == "etcd-client", "drivers and executors mount it too"
    assert options.etcd_user == "root", "etcd auth: each job gets a user of its own"
    operator = find(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    password = {"secretKeyRef": {"name": "etcd-root", "key": "password"}}
    assert {"name": "LOCKGATE_ETCD_PASSWORD", "valueFrom": password} in operator["env"]
    assert options.peering == "lockgate", "two replicas: kopf peering, one active"
    assert options.checkpoint_storage == "s3://b/lockgate"
    assert options.allow_privileged_pods
    assert options.allow_custom_storage_roots
    pod = find(objects, "Deployment")[0]["spec"]["template"]["spec"]
    assert {"name": "etcd-tls", "secret": {"secretName": "etcd-client"}} in pod["volumes"]
    assert find(objects, "StatefulSet") == [], "no bundled etcd"
    (reader,) = find(objects, "ClusterRole")  # besides a Role per watched namespace: to read those
    assert reader["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["namespaces"],
            "resourceNames": ["streams", "batch"],
            "verbs": ["get"],
        }
    ], "is the job's namespace restricted? Nothing else cluster-wide"
    assert sorted(r["metadata"]["namespace"] for r in find(objects, "Role")) == ["batch", "streams"]
    assert sorted(p["metadata"]["namespace"] for p in find(objects, "KopfPeering")) == ["batch", "streams"]
    for monitor in find(objects, "PodMonitor"):
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    jobs = find(objects, "PodMonitor", "lockgate-jobs")[0]
    assert jobs["spec"]["namespaceSelector"] == {"matchNames": ["streams", "batch"]}
    assert jobs["spec"]["selector"]["matchLabels"] == {"app.kubernetes.io/managed-by": "lockgate-operator"}
    assert jobs["spec"]["podMetricsEndpoints"][0]["port"] == "metrics", (
        "the port name drivers and executors use"
    )


def _covers(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in rules)


@pytest.mark.parametrize("values", [None, NON_DEFAULT], ids=["cluster-wide", "namespaced"])
def test_the_operator_holds_what_it_grants_its_drivers(values: dict[str, Any] | None) -> None:
    """Kubernetes lets a Role grant only what its creator holds."""
    roles = find(render(values), "ClusterRole", "lockgate-operator") or find(render(values), "Role")
    driver = role(JobNames("streams", "sums"))
    for held in roles:
        for rule in driver["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        assert _covers(held["rules"], group, resource, verb), (group, resource, verb)
        assert _covers(held["rules"], "lockgate.dev", "streamingjobs/status", "patch")
        assert not _covers(held["rules"], "", "secrets", "get"), "the operator never reads secrets"
        for rule in held["rules"]:
            assert "deletecollection" not in rule["verbs"], f"{rule}: a whole namespace's objects at once"
            assert "persistentvolumeclaims" not in rule["resources"], f"{rule}: jobs get no claims"


def test_the_operator_gets_its_storage_credentials_as_a_pod_does() -> None:
    """It deletes old savepoints and deleted jobs' checkpoints with credentials of its own."""
    pod = find(render(NON_DEFAULT), "Deployment")[0]["spec"]["template"]["spec"]
    (operator,) = pod["containers"]
    assert operator["envFrom"] == [{"secretRef": {"name": "lockgate-storage"}}]
    assert [v["name"] for v in operator["env"]] == ["AWS_ENDPOINT_URL", "LOCKGATE_ETCD_PASSWORD"], (
        "the chart's own last: of two of one name the last counts"
    )
    assert {"name": "gcs-key", "secret": {"secretName": "gcs-key"}} in pod["volumes"]
    assert {"name": "gcs-key", "mountPath": "/var/run/gcs", "readOnly": True} in operator["volumeMounts"]
    assert {"name": "tmp", "mountPath": "/tmp"} in operator["volumeMounts"], "beside the chart's own"
    plain = find(render(), "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "envFrom" not in plain


def test_a_volume_named_as_the_charts_own_is_refused() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"operator\.volumes: the name \"tmp\" is the chart's own"):
        render({"operator": {"volumes": [{"name": "tmp", "emptyDir": {}}]}})


def test_the_operator_reads_the_namespaces_of_jobs_unless_it_runs_them_in_any() -> None:
    """It refuses jobs in namespaces that do not enforce Pod Security restricted."""
    (cluster_role,) = find(render(), "ClusterRole", "lockgate-operator")
    assert _covers(cluster_role["rules"], "", "namespaces", "get")
    anywhere = render({"operator": {"watchNamespaces": ["streams"], "allowUnrestrictedNamespaces": True}})
    assert _parse_operator_args(operator_args(anywhere)).allow_unrestricted_namespaces
    assert find(anywhere, "ClusterRole") == [], "nothing to read: nothing cluster-wide"


@pytest.mark.parametrize(
    ("values", "culprit"),
    [
        ({"operator": {"replicas": "two"}}, "/operator/replicas"),
        ({"monitoring": {"podMonitors": "sometimes"}}, "/monitoring/podMonitors"),
        ({"operater": {"replicas": 2}}, "'operater' not allowed"),
        ({"etcd": {"endpoints": ["etcd:2379"]}}, "/etcd/endpoints/0"),
        ({"operator": {"envFrom": [{"secret": {"name": "s3"}}]}}, "/operator/envFrom/0"),
        ({"operator": {"volumeMounts": [{"name": "key"}]}}, "/operator/volumeMounts/0"),
        ({"operator": {"env": [{"value": "x"}]}}, "/operator/env/0"),
    ],
)
def test_bad_values_are_refused_naming_the_key(values: dict[str, Any], culprit: str) -> None:
    with pytest.raises(helm.HelmValuesError, match=culprit):
        helm.Chart.load(CHART).validate_schema(values)


def test_an_etcd_user_needs_its_password_secret() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"etcd\.auth\.passwordSecret is required"):
        render({"etcd": {"auth": {"user": "root"}}})
    with pytest.raises(helm.HelmRenderError, match=r"etcd\.auth\.passwordSecret is required"):
        render({"etcd": {"bundled": {"auth": False}, "auth": {"user": "alice"}}})


def test_the_bundled_etcds_auth_is_enabled_as_root() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"etcd\.auth\.user \"alice\": .* leave it empty or root"):
        render({"etcd": {"auth": {"user": "alice", "passwordSecret": "alices"}}})


def test_external_etcd_needs_endpoints() -> None:
    with pytest.raises(helm.HelmRenderError, match=r"etcd\.endpoints is required"):
        render({"etcd": {"bundled": {"enabled": False}}})


def test_the_values_file_documents_every_default(tmp_path: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    helm.Chart.load(CHART).validate_schema(values)
    assert helm.Chart.load(CHART).values == values


def _etcd_command(objects: list[dict[str, Any]]) -> list[str]:
    command: list[str] = find(objects, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0][
        "command"
    ]
    return command


def test_the_bundled_etcd_admits_only_certificate_holders_and_the_operator_turns_auth_on() -> None:
    objects = render()
    command = _etcd_command(objects)
    assert "--client-cert-auth=true" in command
    assert "--peer-client-cert-auth=true" in command
    assert not [flag for flag in command if "http://0.0.0.0:2379" in flag or "http://0.0.0.0:2380" in flag]
    operator = find(objects, "Deployment")[0]["spec"]["template"]["spec"]
    password = {"secretKeyRef": {"name": "lockgate-etcd-root", "key": "password"}}
    assert {"name": "LOCKGATE_ETCD_PASSWORD", "valueFrom": password} in operator["containers"][0]["env"]
    assert {"name": "etcd-tls", "secret": {"secretName": "lockgate-etcd-client"}} in operator["volumes"]
    generated = {s["metadata"]["name"]: s for s in find(objects, "Secret")}
    assert set(generated) == {"lockgate-etcd-server", "lockgate-etcd-client", "lockgate-etcd-root"}
    for secret in generated.values():
        assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep", (
            "the etcd volume outlives"
        )
    assert "ca.key" not in generated["lockgate-etcd-client"]["data"], "nobody can mint a certificate"
    assert find(objects, "NetworkPolicy", "lockgate-etcd")


def test_each_etcd_guard_can_be_turned_off() -> None:
    objects = render({"etcd": {"bundled": {"tls": False, "auth": False, "networkPolicy": False}}})
    options = _parse_operator_args(operator_args(objects))
    assert options.etcd == f"http://lockgate-etcd.{NAMESPACE}.svc:2379"
    assert (options.etcd_user, options.etcd_tls_secret, options.etcd_enable_auth) == (None, None, False)
    assert "--listen-client-urls=http://0.0.0.0:2379" in _etcd_command(objects)
    assert find(objects, "Secret") == []
    assert find(objects, "NetworkPolicy") == []


def test_the_bundled_etcd_with_certificates_of_ones_own() -> None:
    values = {
        "etcd": {"bundled": {"serverSecret": "my-etcd-member"}, "tls": {"secretName": "my-etcd-client"}}
    }
    objects = render(values)
    options = _parse_operator_args(operator_args(objects))
    assert options.etcd_tls_secret == "my-etcd-client"
    etcd_pod = find(objects, "StatefulSet")[0]["spec"]["template"]["spec"]
    assert {"name": "tls", "secret": {"secretName": "my-etcd-member"}} in etcd_pod["volumes"]
    assert [s["metadata"]["name"] for s in find(objects, "Secret")] == ["lockgate-etcd-root"]


def test_watched_namespaces_get_the_client_certificate_their_jobs_mount() -> None:
    objects = render({"operator": {"watchNamespaces": ["streams", "batch"]}})
    copies = find(objects, "Secret", "lockgate-etcd-client")
    assert sorted(s["metadata"]["namespace"] for s in copies) == ["batch", NAMESPACE, "streams"]
    assert len({s["data"]["tls.crt"] for s in copies}) == 1


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"etcd": {"bundled": {"tls": False}}}, r"etcd\.bundled\.auth needs etcd\.bundled\.tls"),
        ({"etcd": {"bundled": {"serverSecret": "mine"}}}, r"name both \(certificates of one CA\) or neither"),
    ],
)
def test_an_open_window_or_two_cas_are_refused(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmRenderError, match=message):
        render(values)
