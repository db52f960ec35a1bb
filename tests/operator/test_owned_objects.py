"""The objects the operator creates for a job: valid Kubernetes objects, a driver
command that carries the spec, and a ConfigMap the driver reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from lockgate.operator.driver_pod import LAUNCH_ENVIRONMENT, Cluster, Launch, driver_arguments, driver_pod
from lockgate.operator.job_policy import JobPolicy, check_job
from lockgate.operator.naming import JobNames
from lockgate.operator.owned import owned_objects, snapshot_key_secret
from lockgate.operator.spec import SpecError, parse_spec
from lockgate.runtime.driver.__main__ import parser as driver_parser
from lockgate.runtime.driver.options import settings_from
from lockgate.runtime.spec.manifest import load_manifest

from tests.operator.test_crd import KUBERNETES

NAMES = JobNames("streams", "sums")
CLUSTER = Cluster("http://etcd.lockgate:2379", "s3://bucket/checkpoints")
SPEC = {
    "image": "lockgate:1",
    "job": {"entrypoint": "jobs.sums:build", "args": {"keys": "1000"}},
    "replicas": 4,
    "maxParallelism": 128,
    "executor": {"resources": {"requests": {"cpu": "1", "memory": "2Gi"}}},
    "sparkConf": {"spark.sql.shuffle.partitions": "4"},
    "podTemplate": {"metadata": {"labels": {"team": "a"}}, "spec": {"nodeSelector": {"pool": "streams"}}},
}


def _conf(pod: dict[str, Any]) -> dict[str, str]:
    args = pod["spec"]["containers"][0]["args"]
    pairs = [args[i + 1] for i, a in enumerate(args[: args.index("--")]) if a == "--conf"]
    return dict(pair.split("=", 1) for pair in pairs)


def _driver_args(pod: dict[str, Any]) -> list[str]:
    args: list[str] = pod["spec"]["containers"][0]["args"]
    return args[args.index("--") + 1 :]


def test_every_object_is_valid_kubernetes() -> None:
    spec = parse_spec(SPEC)
    objects = [*owned_objects(NAMES, SPEC, CLUSTER, own_service_account=True)]
    objects.append(driver_pod(NAMES, spec, Launch(1, 128, "latest"), CLUSTER))
    for obj in objects:
        kubernetes_validate.validate(obj, KUBERNETES, strict=True)
    assert [o["kind"] for o in objects] == [
        "ConfigMap",
        "Service",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Pod",
    ]
    for obj in objects:
        assert obj["metadata"]["namespace"] == "streams"
        assert obj["metadata"]["labels"]["lockgate.dev/job"] == "sums"


@pytest.mark.parametrize(
    ("memory", "spark"),
    [("2Gi", "2g"), ("1.5Gi", "1536m"), ("2G", "1953125k"), ("512Mi", "512m"), ("1Ti", "1t"), (2**30, "1g")],
)
def test_an_executors_memory_is_given_to_spark_exactly(memory: object, spark: str) -> None:
    """Failed before: 1.5Gi passed the CRD and was refused by the operator, and 2G
    (10^9 bytes) was given to Spark as 2g (2^30)."""
    spec = {**SPEC, "executor": {"resources": {"limits": {"memory": memory}}}}
    assert (
        _conf(driver_pod(NAMES, parse_spec(spec), Launch(3, 128, "latest"), CLUSTER))["spark.executor.memory"]
        == spark
    )


@pytest.mark.parametrize(
    ("resources", "complaint"),
    [
        (
            {"requests": {"memory": "lots"}},
            r"requests\.memory: 'lots' is not a quantity like 500m, 2, 512Mi or 1\.5Gi",
        ),
        ({"limits": {"cpu": "-1"}}, r"limits\.cpu must not be negative, got '-1'"),
        (
            {"requests": {"cpu": "2"}, "limits": {"cpu": "500m"}},
            r"requests\.cpu 2 is more than limits\.cpu 500m",
        ),
        ({"requests": {"memory": "256Mi"}}, r"256Mi is less than the 450Mi Spark needs for an executor"),
    ],
)
def test_a_resource_quantity_the_pods_could_not_have_is_refused_naming_it(
    resources: dict[str, Any], complaint: str
) -> None:
    for part in ("executor", "driver"):
        if "450Mi" in complaint and part == "driver":
            continue  # Spark's minimum is the executors'
        spec = {**SPEC, part: {"resources": resources}}
        with pytest.raises(SpecError, match=rf"spec\.{part}\.resources.*{complaint}"):
            driver_pod(NAMES, parse_spec(spec), Launch(3, 128, "latest"), CLUSTER)


def test_the_driver_runs_one_executor_per_subtask_owned_by_its_pod() -> None:
    pod = driver_pod(NAMES, parse_spec(SPEC), Launch(3, 128, "latest"), CLUSTER)
    conf = _conf(pod)
    assert pod["metadata"]["name"] == "sums-driver-3"
    assert conf["spark.executor.instances"] == "4"
    assert conf["spark.executor.cores"] == "1"
    assert conf["spark.kubernetes.driver.pod.name"] == "sums-driver-3", (
        "executors are owned by the driver pod"
    )
    assert conf["spark.driver.host"] == "sums-driver.streams.svc"
    assert conf["spark.executor.memory"] == "2g"
    assert conf["spark.kubernetes.executor.label.lockgate.dev/job"] == "sums"
    assert conf["spark.sql.shuffle.partitions"] == "4"
    args = pod["spec"]["containers"][0]["args"]
    assert args[:4] == ["--master", "k8s://https://kubernetes.default.svc", "--deploy-mode", "client"]
    driver = _driver_args(pod)
    assert driver[0] == "/etc/lockgate/job.yaml"
    assert driver[driver.index("--parallelism") + 1] == "4"
    assert driver[driver.index("--max-parallelism") + 1] == "128"
    assert driver[driver.index("--checkpoint-dir") + 1] == "s3://bucket/checkpoints/streams"
    assert driver[driver.index("--savepoint-dir") + 1] == "s3://bucket/checkpoints/streams/_savepoints/sums"
    assert "--checkpoint-interval" not in driver, "the driver reads the spec from the ConfigMap"
    assert "--from-savepoint" not in driver, "last-state resumes the latest checkpoint"
    assert "--fresh" not in driver
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["LOCKGATE_ETCD"] == "http://etcd.lockgate:2379"
    assert pod["spec"]["nodeSelector"] == {"pool": "streams"}
    assert pod["metadata"]["labels"]["team"] == "a"
    assert conf["spark.kubernetes.executor.podTemplateFile"] == "/etc/lockgate/executor-pod-template.yaml"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_the_driver_takes_the_operators_command_line_and_manifest(tmp_path: Path) -> None:
    spec = {**SPEC, "job": {**SPEC["job"], "allowNonRestoredState": True}}  # type: ignore[dict-item]
    cluster = Cluster("http://etcd.lockgate:2379", "file:///shared/checkpoints")
    config_map = owned_objects(NAMES, spec, cluster, own_service_account=False)[0]
    (tmp_path / "job.yaml").write_text(config_map["data"]["job.yaml"])
    flags = driver_arguments(NAMES, parse_spec(spec), Launch(3, 128, "latest"), cluster)
    key_flag = flags.index("--snapshot-key-file") + 1
    assert flags[key_flag] == "/etc/lockgate-snapshot-key/key", "where the driver pod mounts the Secret"
    (tmp_path / "key").write_text(snapshot_key_secret(NAMES)["stringData"]["key"])  # as the kubelet does
    flags[key_flag] = str(tmp_path / "key")
    arguments = driver_parser().parse_args(
        [str(tmp_path / "job.yaml"), *flags[1:], "--etcd", cluster.etcd_endpoints]
    )
    settings = settings_from(arguments, tmp_path, fresh_by_default=False)
    assert (settings.entrypoint, settings.keys.namespace, settings.keys.job) == (
        "jobs.sums:build",
        "streams",
        "sums",
    )
    assert (settings.parallelism, settings.max_parallelism, settings.allow_non_restored_state) == (
        4,
        128,
        True,
    )
    assert settings.checkpoint_dir == "file:///shared/checkpoints/streams"


def test_restore_flags_follow_the_launch() -> None:
    spec = parse_spec(SPEC)
    from_savepoint = driver_pod(NAMES, spec, Launch(2, 128, "savepoint", "s3://b/savepoint-1"), CLUSTER)
    assert _driver_args(from_savepoint)[-2:] == ["--from-savepoint", "s3://b/savepoint-1"]
    empty = driver_pod(NAMES, spec, Launch(2, 128, "empty"), CLUSTER)
    assert _driver_args(empty)[-1] == "--fresh"
    with pytest.raises(ValueError, match="savepoint path goes with"):
        Launch(2, 128, "latest", "s3://b/savepoint-1")


def test_the_config_map_is_the_manifest_the_driver_reads(tmp_path: Path) -> None:
    config_map = owned_objects(NAMES, SPEC, CLUSTER, own_service_account=False)[0]
    (tmp_path / "job.yaml").write_text(config_map["data"]["job.yaml"])
    manifest = load_manifest(tmp_path / "job.yaml")
    assert (manifest.spec.entrypoint, manifest.metadata.name, manifest.metadata.namespace) == (
        "jobs.sums:build",
        "sums",
        "streams",
    )
    assert manifest.spec.args == {"keys": "1000"}
    assert yaml.safe_load(config_map["data"]["job.yaml"])["spec"] == SPEC
    executor_template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    kubernetes_validate.validate(executor_template, KUBERNETES, strict=True)
    assert executor_template["spec"]["nodeSelector"] == {"pool": "streams"}, "executors get the overrides too"


def test_driver_and_executors_expose_their_metrics_ports() -> None:
    pod = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), CLUSTER)
    driver = _driver_args(pod)
    assert driver[driver.index("--metrics-port") + 1] == "9249"
    assert driver[driver.index("--task-metrics-ports") + 1] == "9250"
    assert {"name": "metrics", "containerPort": 9249} in pod["spec"]["containers"][0]["ports"]
    plain = {k: v for k, v in SPEC.items() if k != "podTemplate"}
    own_sidecar = {
        **SPEC,
        "podTemplate": {
            "spec": {
                "containers": [
                    {"name": "log-shipper", "image": "fluent-bit:3"},
                    {"name": "executor", "ports": [{"name": "jmx", "containerPort": 9999}]},
                ]
            }
        },
    }
    for spec in (plain, own_sidecar):
        template = yaml.safe_load(
            owned_objects(NAMES, spec, CLUSTER, own_service_account=False)[0]["data"][
                "executor-pod-template.yaml"
            ]
        )
        kubernetes_validate.validate(template, KUBERNETES, strict=True)
        executor = next(c for c in template["spec"]["containers"] if c["name"] == "executor")
        assert {"name": "metrics", "containerPort": 9250} in executor["ports"]
    assert {"name": "jmx", "containerPort": 9999} in executor["ports"], "the template's own ports stay"
    assert template["spec"]["containers"][0]["name"] == "log-shipper"


@pytest.mark.parametrize(
    ("change", "culprit"),
    [
        ({"sparkConf": {"spark.executor.instances": "9"}}, r"spec.sparkConf\['spark.executor.instances'\]"),
        (
            {"executor": {"resources": {"requests": {"memory": "256Mi"}}}},
            "spec.executor.resources memory: 256Mi",
        ),
        ({"checkpointing": {"storage": None}}, "spec.checkpointing.storage is required"),
    ],
)
def test_a_spec_the_driver_cannot_run_names_the_field(change: dict[str, Any], culprit: str) -> None:
    spec = parse_spec({**SPEC, **change})
    with pytest.raises(SpecError, match=culprit):
        driver_pod(NAMES, spec, Launch(1, 128, "latest"), Cluster("http://etcd:2379"))


@pytest.mark.parametrize(
    ("spec", "culprit"),
    [
        ({**SPEC, "replicas": 200}, "spec.replicas 200 exceeds spec.maxParallelism 128"),
        ({**SPEC, "replicas": "4"}, "spec.replicas must be an integer"),
        ({**SPEC, "job": {"entrypoint": "sums"}}, "spec.job.entrypoint must be module:function"),
        ({**SPEC, "checkpointing": {"interval": "often"}}, "spec.checkpointing.interval"),
        (
            {**SPEC, "upgradeMode": "rolling"},
            "spec.upgradeMode must be one of savepoint, last-state, stateless",
        ),
        ({**SPEC, "restartStrategy": {"type": "forever"}}, "spec.restartStrategy.type must be one of"),
    ],
)
def test_a_bad_spec_names_the_field(spec: dict[str, Any], culprit: str) -> None:
    with pytest.raises(SpecError, match=culprit):
        parse_spec(spec)


def test_equal_names_in_two_namespaces_never_share_storage() -> None:
    spec = parse_spec(SPEC)
    here = driver_arguments(NAMES, spec, Launch(1, 128, "latest"), CLUSTER)
    there = driver_arguments(JobNames("other", "sums"), spec, Launch(1, 128, "latest"), CLUSTER)
    for flag in ("--checkpoint-dir", "--savepoint-dir"):
        assert here[here.index(flag) + 1] != there[there.index(flag) + 1]


def test_with_an_etcd_tls_secret_driver_and_executors_mount_it_at_the_same_path() -> None:
    tls = Cluster("https://etcd.lockgate:2379", "s3://bucket/checkpoints", etcd_tls_secret="etcd-client")
    pod = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), tls)
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    driver = _driver_args(pod)
    flags = {flag: driver[driver.index(flag) + 1] for flag in ("--etcd-ca", "--etcd-cert", "--etcd-key")}
    assert flags == {
        "--etcd-ca": "/etc/lockgate-etcd-tls/ca.crt",
        "--etcd-cert": "/etc/lockgate-etcd-tls/tls.crt",
        "--etcd-key": "/etc/lockgate-etcd-tls/tls.key",
    }
    volume = {"name": "etcd-tls", "secret": {"secretName": "etcd-client"}}
    mount = {"name": "etcd-tls", "mountPath": "/etc/lockgate-etcd-tls", "readOnly": True}
    assert volume in pod["spec"]["volumes"]
    assert mount in pod["spec"]["containers"][0]["volumeMounts"]
    config_map = owned_objects(NAMES, SPEC, tls, own_service_account=False)[0]
    template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    kubernetes_validate.validate(template, KUBERNETES, strict=True)
    assert volume in template["spec"]["volumes"], "tasks connect to etcd with the driver's file paths"
    assert mount in template["spec"]["containers"][0]["volumeMounts"]
    plain = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), CLUSTER)
    assert "--etcd-ca" not in _driver_args(plain)


def test_a_named_service_account_runs_the_driver_and_the_executors() -> None:
    named = driver_pod(
        NAMES, parse_spec({**SPEC, "serviceAccountName": "uploader"}), Launch(1, 128, "latest"), CLUSTER
    )
    assert named["spec"]["serviceAccountName"] == "uploader"
    assert _conf(named)["spark.kubernetes.authenticate.executor.serviceAccountName"] == "uploader"
    own = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), CLUSTER)
    assert own["spec"]["serviceAccountName"] == "sums-lockgate"
    assert "spark.kubernetes.authenticate.executor.serviceAccountName" not in _conf(own), (
        "executors need none of the rights of the account the operator makes for the driver"
    )


def test_the_templates_driver_and_executor_containers_give_their_env_to_those_pods() -> None:
    credentials = [{"secretRef": {"name": "s3-credentials"}}]
    template = {
        "spec": {
            "containers": [
                {"name": "driver", "env": [{"name": "ROLE", "value": "d"}], "envFrom": credentials},
                {"name": "executor", "env": [{"name": "ROLE", "value": "e"}], "envFrom": credentials},
            ]
        }
    }
    spec = {**SPEC, "podTemplate": template}
    pod = driver_pod(NAMES, parse_spec(spec), Launch(1, 128, "latest"), CLUSTER)
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    (driver,) = pod["spec"]["containers"]
    assert {"name": "ROLE", "value": "d"} in driver["env"]
    assert driver["envFrom"] == credentials
    operators = [e["name"] for e in driver["env"]][-1 - len(LAUNCH_ENVIRONMENT) :]
    assert operators == ["LOCKGATE_ETCD", *LAUNCH_ENVIRONMENT], "the operator's settings come last: they win"
    config_map = owned_objects(NAMES, spec, CLUSTER, own_service_account=False)[0]
    executor_template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    kubernetes_validate.validate(executor_template, KUBERNETES, strict=True)
    (executor,) = executor_template["spec"]["containers"]
    pinned = [{"name": name, "value": ""} for name in LAUNCH_ENVIRONMENT if name != "SPARK_CONF_DIR"]
    assert (executor["name"], executor["env"], executor["envFrom"]) == (
        "executor",
        [{"name": "ROLE", "value": "e"}, *pinned],
        credentials,
    ), "Spark keeps the template container's env and adds its own"


def test_spec_volumes_are_mounted_at_the_same_path_in_driver_and_executors() -> None:
    claim = {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "shared-checkpoints"}}
    mount = {"name": "checkpoints", "mountPath": "/data"}
    spec = {**SPEC, "volumes": [claim], "volumeMounts": [mount]}
    pod = driver_pod(NAMES, parse_spec(spec), Launch(1, 128, "latest"), CLUSTER)
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    assert claim in pod["spec"]["volumes"]
    assert mount in pod["spec"]["containers"][0]["volumeMounts"]
    config_map = owned_objects(NAMES, spec, CLUSTER, own_service_account=False)[0]
    template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    kubernetes_validate.validate(template, KUBERNETES, strict=True)
    assert claim in template["spec"]["volumes"]
    assert mount in template["spec"]["containers"][0]["volumeMounts"]


@pytest.mark.parametrize(
    ("change", "culprit"),
    [
        ({"volumes": {"name": "x"}}, "spec.volumes must be a list"),
        ({"volumes": [{"emptyDir": {}}]}, r"spec.volumes\[0\] must be an object with a name"),
        (
            {"volumes": [{"name": "a", "emptyDir": {}}], "volumeMounts": [{"name": "b", "mountPath": "/b"}]},
            r"spec.volumeMounts\[0\] must name a volume of spec.volumes \(\['a'\]\)",
        ),
    ],
)
def test_a_volume_mount_must_name_a_declared_volume(change: dict[str, Any], culprit: str) -> None:
    with pytest.raises(SpecError, match=culprit):
        parse_spec({**SPEC, **change})


@pytest.mark.parametrize(
    "manifest", sorted((Path(__file__).parents[2] / "examples").glob("*.yaml")), ids=lambda p: p.name
)
def test_every_example_manifest_runs_on_a_cluster_as_written(manifest: Path) -> None:
    """Its storage and output are where every pod reaches them: a file:// URL on a volume
    all of them mount, else object storage with the same credentials in driver and executors."""
    spec = yaml.safe_load(manifest.read_text())["spec"]
    operations = (Path(__file__).parents[2] / "docs" / "operations.md").read_text()
    guide = operations.split("## From an empty cluster")[1].split("\n## ")[0]  # the step-by-step guide
    (root,) = set(re.findall(r"--set operator\.checkpointStorage=(\S+)(?: \\)?$", guide, re.MULTILINE))
    check_job(parse_spec(spec), NAMES, Cluster(CLUSTER.etcd_endpoints, root), JobPolicy())
    pod = driver_pod(NAMES, parse_spec(spec), Launch(1, 128, "latest"), CLUSTER)
    kubernetes_validate.validate(pod, KUBERNETES, strict=True)
    template = yaml.safe_load(
        owned_objects(NAMES, spec, CLUSTER, own_service_account=False)[0]["data"][
            "executor-pod-template.yaml"
        ]
    )
    kubernetes_validate.validate(template, KUBERNETES, strict=True)
    (driver,) = pod["spec"]["containers"]
    executor = next(c for c in template["spec"]["containers"] if c["name"] == "executor")
    mounted = [m["mountPath"] for m in spec.get("volumeMounts") or []]
    urls = [
        spec["checkpointing"].get("storage") or root,  # none named: the operator's root
        *[v for v in spec["job"].get("args", {}).values() if "://" in v],
    ]
    for url in urls:
        if url.startswith("file://"):
            path = url.removeprefix("file://")
            assert any(path.startswith(f"{m.rstrip('/')}/") for m in mounted), f"{url}: on no shared volume"
        else:
            identity = "serviceAccountName" in spec
            assert identity or (driver.get("envFrom") and driver.get("envFrom") == executor.get("envFrom")), (
                f"{url}: the driver and the executors need the same credentials"
            )


def test_the_service_carries_what_executors_connect_to_and_not_the_spark_ui() -> None:
    service = owned_objects(NAMES, SPEC, CLUSTER, own_service_account=False)[1]
    assert service["kind"] == "Service"
    assert {port["name"] for port in service["spec"]["ports"]} == {"driver-rpc", "blockmanager"}
    pod = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), CLUSTER)
    arguments = _driver_args(pod)
    assert arguments[arguments.index("--metrics-bind") + 1] == "0.0.0.0", (
        "Prometheus scrapes the pod's address"
    )


def test_spark_rpc_is_authenticated_and_encrypted_and_a_job_cannot_turn_that_off() -> None:
    pod = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), CLUSTER)
    assert _conf(pod)["spark.authenticate"] == "true"
    assert _conf(pod)["spark.network.crypto.enabled"] == "true"
    for key in ("spark.authenticate", "spark.network.crypto.enabled"):
        spec = parse_spec({**SPEC, "sparkConf": {key: "false"}})
        with pytest.raises(SpecError, match=f"spec.sparkConf\\[{key!r}\\] is set by the operator"):
            driver_pod(NAMES, spec, Launch(1, 128, "latest"), CLUSTER)


def test_only_the_driver_mounts_the_jobs_snapshot_key() -> None:
    pod = driver_pod(NAMES, parse_spec(SPEC), Launch(1, 128, "latest"), CLUSTER)
    arguments = _driver_args(pod)
    key_file = arguments[arguments.index("--snapshot-key-file") + 1]
    (driver,) = pod["spec"]["containers"]
    (mount,) = [m for m in driver["volumeMounts"] if key_file.startswith(f"{m['mountPath']}/")]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == "sums-lockgate-snapshot-key"
    secret = snapshot_key_secret(NAMES)
    kubernetes_validate.validate(secret, KUBERNETES, strict=True)
    assert len(bytes.fromhex(secret["stringData"]["key"])) == 32
    assert snapshot_key_secret(NAMES)["stringData"] != secret["stringData"], "a new job gets a new key"
    template = yaml.safe_load(
        owned_objects(NAMES, SPEC, CLUSTER, own_service_account=False)[0]["data"][
            "executor-pod-template.yaml"
        ]
    )
    assert all("secret" not in v or "snapshot" not in v["name"] for v in template["spec"]["volumes"])
