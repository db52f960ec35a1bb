"""What a StreamingJob may ask the operator for: each route to more than a restricted
pod in its own namespace is refused naming the field, unless the cluster admin
started the operator with the option that allows it; the pods meet Pod Security
"restricted"."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from lockgate.operator.driver_pod import LAUNCH_ENVIRONMENT, Cluster, Launch, driver_pod
from lockgate.operator.job_policy import (
    JobPolicy,
    NamespaceNotRestrictedError,
    check_job,
    check_namespace,
    check_service_account,
)
from lockgate.operator.naming import JobNames
from lockgate.operator.owned import executor_pod_template, owned_objects
from lockgate.operator.spec import SpecError, parse_spec

from tests.pod_security import restricted_violations

NAMES = JobNames("team-a", "sums")
CLUSTER = Cluster("http://etcd:2379", "s3://bucket/lockgate")
SPEC: dict[str, Any] = {"image": "lockgate:1", "job": {"entrypoint": "jobs.sums:build"}}
STRICT, TRUSTING = JobPolicy(), JobPolicy(allow_privileged_pods=True, allow_custom_storage_roots=True)


def _check(change: dict[str, Any], policy: JobPolicy = STRICT, cluster: Cluster = CLUSTER) -> None:
    check_job(parse_spec({**SPEC, **change}), NAMES, cluster, policy)


def _template(pod_spec: dict[str, Any]) -> dict[str, Any]:
    return {"podTemplate": {"spec": pod_spec}}


def _executor(container: dict[str, Any]) -> dict[str, Any]:
    return _template({"containers": [{"name": "executor", **container}]})


REFUSED_PODS = [
    (
        {"volumes": [{"name": "root", "hostPath": {"path": "/"}}]},
        "spec.volumes[0] (root) is of kind hostPath",
    ),
    ({"volumes": [{"name": "n", "nfs": {"server": "s", "path": "/"}}]}, "spec.volumes[0] (n) is of kind nfs"),
    (_template({"hostNetwork": True}), "spec.podTemplate.spec.hostNetwork is refused"),
    (_template({"hostPID": True}), "spec.podTemplate.spec.hostPID is refused"),
    (_template({"hostIPC": True}), "spec.podTemplate.spec.hostIPC is refused"),
    (_template({"securityContext": {"runAsUser": 0}}), "spec.podTemplate.spec.securityContext is refused"),
    (_template({"serviceAccountName": "admin"}), "spec.podTemplate.spec.serviceAccountName is refused"),
    (_template({"nodeName": "control-plane"}), "spec.podTemplate.spec.nodeName is refused"),
    (
        _template({"volumes": [{"name": "h", "hostPath": {"path": "/var/run"}}]}),
        "spec.podTemplate.spec.volumes[0] (h) is of kind hostPath",
    ),
    (
        _executor({"securityContext": {"privileged": True}}),
        "spec.podTemplate.spec.containers[0].securityContext is refused",
    ),
    (
        _executor({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}}),
        "spec.podTemplate.spec.containers[0].securityContext is refused",
    ),
    (_executor({"command": ["sh"]}), "spec.podTemplate.spec.containers[0].command is refused"),
    (
        _template({"containers": [{"name": "sidecar", "image": "x"}]}),
        "spec.podTemplate.spec.containers[0]: only containers named driver or executor",
    ),
    ({"podTemplate": {"metadata": {"ownerReferences": []}}}, "spec.podTemplate.metadata.ownerReferences"),
    (
        {"sparkConf": {"spark.kubernetes.executor.secrets.admin-token": "/var/run/secrets/admin"}},
        "spec.sparkConf['spark.kubernetes.executor.secrets.admin-token'] is refused (secrets",
    ),
    (
        {"sparkConf": {"spark.kubernetes.driver.secretKeyRef.TOKEN": "admin:token"}},
        "spec.sparkConf['spark.kubernetes.driver.secretKeyRef.TOKEN'] is refused (secrets",
    ),
    (
        {"sparkConf": {"spark.kubernetes.authenticate.driver.serviceAccountName": "admin"}},
        "spec.sparkConf['spark.kubernetes.authenticate.driver.serviceAccountName'] is refused (identity",
    ),
    (
        {"sparkConf": {"spark.kubernetes.driver.volumes.hostPath.root.options.path": "/"}},
        "spec.sparkConf['spark.kubernetes.driver.volumes.hostPath.root.options.path'] is refused (volumes",
    ),
    (
        {"sparkConf": {"spark.kubernetes.driver.podTemplateFile": "/tmp/pod.yaml"}},
        "spec.sparkConf['spark.kubernetes.driver.podTemplateFile'] is refused (pod templates",
    ),
    (
        {"sparkConf": {"spark.kubernetes.executor.pod.featureSteps": "evil.Step"}},
        "spec.sparkConf['spark.kubernetes.executor.pod.featureSteps'] is refused",
    ),
]


def _annotated(annotations: dict[str, str]) -> dict[str, Any]:
    return {"podTemplate": {"metadata": {"annotations": annotations}}}


# What loosens the pods' confinement past the allowlist above: annotations the kubelet
# and the container runtime read, and the Spark conf keys that set a security context
# or a scheduler of the job's choosing.
REFUSED_CONFINEMENT = [
    (
        _annotated({"container.apparmor.security.beta.kubernetes.io/executor": "unconfined"}),
        "spec.podTemplate.metadata.annotations['container.apparmor.security.beta.kubernetes.io/executor']",
    ),
    (
        _annotated({"container.apparmor.security.beta.kubernetes.io/driver": "localhost/loose"}),
        "annotations['container.apparmor.security.beta.kubernetes.io/driver'] is refused (an annotation",
    ),
    (
        _annotated({"seccomp.security.alpha.kubernetes.io/pod": "unconfined"}),
        "annotations['seccomp.security.alpha.kubernetes.io/pod'] is refused",
    ),
    (
        _annotated({"container.seccomp.security.alpha.kubernetes.io/executor": "unconfined"}),
        "annotations['container.seccomp.security.alpha.kubernetes.io/executor'] is refused",
    ),
    (
        _annotated({"security.alpha.kubernetes.io/unsafe-sysctls": "kernel.msgmax=1"}),
        "annotations['security.alpha.kubernetes.io/unsafe-sysctls'] is refused",
    ),
    (
        _annotated({"io.kubernetes.cri-o.Devices": "/dev/mem"}),
        "annotations['io.kubernetes.cri-o.Devices'] is refused",
    ),
    (
        {
            "sparkConf": {
                "spark.kubernetes.executor.annotation.container.apparmor.security.beta.kubernetes.io/executor": "unconfined"
            }
        },
        "spec.sparkConf['spark.kubernetes.executor.annotation.container.apparmor.security.beta.kubernetes.io/executor'] is refused (an annotation",
    ),
    (
        {
            "sparkConf": {
                "spark.kubernetes.executor.annotation.seccomp.security.alpha.kubernetes.io/pod": "unconfined"
            }
        },
        "spec.sparkConf['spark.kubernetes.executor.annotation.seccomp.security.alpha.kubernetes.io/pod'] is refused",
    ),
    (
        {
            "sparkConf": {
                "spark.kubernetes.driver.annotation.Container.AppArmor.Security.Beta.Kubernetes.io/driver": "unconfined"
            }
        },
        "is refused (an annotation that sets the pods' AppArmor",
    ),
    (
        {"sparkConf": {"spark.kubernetes.executor.securityContext.allowPrivilegeEscalation": "true"}},
        "spec.sparkConf['spark.kubernetes.executor.securityContext.allowPrivilegeEscalation'] is refused (the pods' security context)",
    ),
    (
        {"sparkConf": {"spark.kubernetes.securityContext.allowPrivilegeEscalation": "true"}},
        "spec.sparkConf['spark.kubernetes.securityContext.allowPrivilegeEscalation'] is refused",
    ),
    (
        {"sparkConf": {"spark.kubernetes.executor.scheduler.name": "anywhere"}},
        "spec.sparkConf['spark.kubernetes.executor.scheduler.name'] is refused (a scheduler of the job's choosing",
    ),
    (
        {"sparkConf": {"spark.kubernetes.scheduler.name": "anywhere"}},
        "spec.sparkConf['spark.kubernetes.scheduler.name'] is refused (a scheduler",
    ),
    (
        {"sparkConf": {"spark.kubernetes.driver.scheduler.name": "anywhere"}},
        "spec.sparkConf['spark.kubernetes.driver.scheduler.name'] is refused (a scheduler",
    ),
    (_template({"schedulerName": "anywhere"}), "spec.podTemplate.spec.schedulerName is refused"),
    (
        {"sparkConf": {"spark.kubernetes.executor.hadoopConfigMapName": "admin-hadoop"}},
        "spec.sparkConf['spark.kubernetes.executor.hadoopConfigMapName'] is refused (Hadoop identity)",
    ),
]
REFUSED_PODS += REFUSED_CONFINEMENT


@pytest.mark.parametrize(("change", "culprit"), REFUSED_PODS)
def test_a_pod_field_beyond_a_restricted_pod_is_refused_naming_it(
    change: dict[str, Any], culprit: str
) -> None:
    with pytest.raises(SpecError, match="--allow-privileged-pods") as refused:
        _check(change)
    assert culprit in str(refused.value)


@pytest.mark.parametrize(("change", "culprit"), REFUSED_PODS)
def test_the_privileged_option_lets_it_through(change: dict[str, Any], culprit: str) -> None:
    _check(change, JobPolicy(allow_privileged_pods=True))


def test_annotations_that_confine_nothing_are_allowed() -> None:
    note = {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false", "prometheus.io/scrape": "true"}
    _check(_annotated(note))
    _check(
        {"sparkConf": {f"spark.kubernetes.executor.annotation.{key}": value for key, value in note.items()}}
    )


@pytest.mark.parametrize(
    "key",
    [
        "spark.kubernetes.container.image",
        "spark.kubernetes.container.image.pullPolicy",
        "spark.kubernetes.container.image.pullSecrets",
        "spark.kubernetes.driver.container.image",
        "spark.kubernetes.executor.container.image",
        "spark.kubernetes.executor.podNamePrefix",
    ],
)
def test_the_image_and_the_executors_names_come_from_the_operator(key: str) -> None:
    """Another image for the executors than spec.image, or another job's executor
    names (`<job>-<launch>`): refused however trusting the operator is."""
    spec = parse_spec({**SPEC, "sparkConf": {key: "team-b-other-1"}})
    with pytest.raises(SpecError, match=rf"spec\.sparkConf\['{key}'\] is set by the operator"):
        driver_pod(NAMES, spec, Launch(1, 128, "latest"), CLUSTER)


@pytest.mark.parametrize("key", ["spark.app.id", "spark.kubernetes.driver.resourceNamePrefix"])
def test_what_tells_one_jobs_pods_from_anothers_is_refused_under_any_policy(key: str) -> None:
    for policy in (STRICT, TRUSTING):
        with pytest.raises(SpecError, match=rf"spec\.sparkConf\['{key}'\] is refused \(.*another job's"):
            _check({"sparkConf": {key: "spark-of-team-b"}}, policy)


@pytest.mark.parametrize("name", ["executor", "driver", "sidecar"])
def test_two_containers_of_one_name_are_refused_under_any_policy(name: str) -> None:
    """The operator gives the first `executor` its settings; Spark merges into one of
    them: a second container of the name would run beside it as written."""
    twice = _template({"containers": [{"name": name}, {"name": name, "env": [{"name": "A", "value": "1"}]}]})
    for policy in (STRICT, TRUSTING):
        with pytest.raises(SpecError) as error:
            _check(twice, policy)
        assert str(error.value) == (
            f"spec.podTemplate.spec.containers[1] is named {name!r} like spec.podTemplate.spec.containers[0]: "
            "a pod's containers need distinct names"
        )


def test_a_job_runs_only_in_a_namespace_enforcing_pod_security_restricted() -> None:
    check_namespace("team-a", {"pod-security.kubernetes.io/enforce": "restricted"}, STRICT)
    for labels, found in [
        (None, "not set"),
        ({}, "not set"),
        ({"pod-security.kubernetes.io/enforce": "baseline"}, "'baseline'"),
        ({"pod-security.kubernetes.io/warn": "restricted"}, "not set"),
    ]:
        with pytest.raises(NamespaceNotRestrictedError) as error:
            check_namespace("team-a", labels, STRICT)
        message = str(error.value)
        assert message.startswith(
            'namespace team-a does not enforce Pod Security "restricted" '
            f"(its label pod-security.kubernetes.io/enforce is {found})"
        )
        assert "kubectl label namespace team-a pod-security.kubernetes.io/enforce=restricted" in message
        assert "--allow-unrestricted-namespaces" in message
        check_namespace("team-a", labels, JobPolicy(allow_unrestricted_namespaces=True))
    with pytest.raises(NamespaceNotRestrictedError):  # trusted with the nodes is not this
        check_namespace("team-a", {}, JobPolicy(allow_privileged_pods=True))


def test_what_places_and_feeds_a_pod_is_allowed() -> None:
    credentials = [{"secretRef": {"name": "s3-credentials"}}]
    env = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "api", "key": "token"}}}]
    template = {
        "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
        "spec": {
            "nodeSelector": {"pool": "streams"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
            "affinity": {},
            "topologySpreadConstraints": [],
            "priorityClassName": "streaming",
            "imagePullSecrets": [{"name": "registry"}],
            "volumes": [{"name": "scratch", "emptyDir": {}}],
            "containers": [
                {"name": "driver", "envFrom": credentials, "env": env},
                {"name": "executor", "envFrom": credentials, "resources": {"limits": {"memory": "4Gi"}}},
            ],
        },
    }
    volumes = [
        {"name": kind, kind: {}}
        for kind in ("configMap", "secret", "persistentVolumeClaim", "emptyDir", "csi", "ephemeral")
    ]
    _check({"podTemplate": template, "volumes": volumes})
    _check({"sparkConf": {"spark.sql.shuffle.partitions": "4", "spark.executor.memoryOverhead": "1g"}})


@pytest.mark.parametrize(
    ("spec", "culprit"),
    [
        ({"podTemplate": {"spec": []}}, "spec.podTemplate.spec must be an object"),
        ({"podTemplate": {"spec": {"containers": {"name": "x"}}}}, "containers must be a list"),
        ({"podTemplate": {"spec": {"containers": ["executor"]}}}, "containers[0] must be an object"),
        ({"podTemplate": {"metadata": "x"}}, "spec.podTemplate.metadata must be an object"),
    ],
)
def test_a_template_of_the_wrong_shape_is_refused_naming_where(spec: dict[str, Any], culprit: str) -> None:
    for policy in (STRICT, TRUSTING):
        with pytest.raises(SpecError) as error:
            _check(spec, policy)
        assert culprit in str(error.value)


def test_an_empty_template_section_reads_as_none() -> None:
    spec = {**SPEC, "podTemplate": {"metadata": None, "spec": None}}
    _check(spec)
    driver_pod(NAMES, parse_spec(spec), Launch(1, 128, "latest"), CLUSTER)
    owned_objects(NAMES, spec, CLUSTER, own_service_account=True)


def test_state_stays_in_the_namespaces_directory_of_the_storage_root() -> None:
    mine = "s3://bucket/lockgate/team-a"
    _check({"checkpointing": {"storage": "s3://bucket/lockgate"}})  # checkpoints go to <storage>/team-a/sums
    _check({"checkpointing": {"storage": f"{mine}/fast"}, "savepoints": {"dir": f"{mine}/savepoints/"}})
    _check({"job": {**SPEC["job"], "importUnsignedSavepoint": f"{mine}/_savepoints/sums/savepoint-3"}})
    refused = [
        ({"savepoints": {"dir": "s3://bucket/lockgate/team-b/_savepoints/sums"}}, "spec.savepoints.dir"),
        ({"savepoints": {"dir": "s3://other-bucket/x"}}, "spec.savepoints.dir"),
        ({"savepoints": {"dir": "s3://bucket/lockgate/team-a-other/x"}}, "spec.savepoints.dir"),
        ({"savepoints": {"dir": f"{mine}/../team-b/x"}}, "spec.savepoints.dir"),
        ({"savepoints": {"dir": f"{mine}/%2e%2e/team-b/x"}}, "spec.savepoints.dir"),
        ({"savepoints": {"dir": f"{mine}//x"}}, "spec.savepoints.dir"),
        ({"checkpointing": {"storage": "s3://bucket/lockgate/team-b"}}, "spec.checkpointing.storage"),
        ({"checkpointing": {"storage": "s3://bucket"}}, "spec.checkpointing.storage"),
        (
            {"job": {**SPEC["job"], "importUnsignedSavepoint": "s3://bucket/lockgate/team-b/sp-1"}},
            "spec.job.importUnsignedSavepoint",
        ),
    ]
    for change, field in refused:
        with pytest.raises(SpecError, match="--allow-custom-storage-roots") as error:
            _check(change)
        assert str(error.value).startswith(field), change
        assert "outside s3://bucket/lockgate/team-a/" in str(error.value)
        _check(change, JobPolicy(allow_custom_storage_roots=True))


def test_without_a_storage_root_a_job_cannot_name_its_own_storage() -> None:
    rootless = Cluster("http://etcd:2379")
    with pytest.raises(SpecError, match="has no storage root") as error:
        _check({"checkpointing": {"storage": "s3://bucket/x"}}, cluster=rootless)
    assert "spec.checkpointing.storage 's3://bucket/x' is refused" in str(error.value)
    _check(
        {"checkpointing": {"storage": "s3://bucket/x"}}, JobPolicy(allow_custom_storage_roots=True), rootless
    )


def test_driver_and_executor_pods_meet_pod_security_restricted() -> None:
    spec = {**SPEC, **_executor({"env": [{"name": "A", "value": "1"}]})}
    pod = driver_pod(NAMES, parse_spec(spec), Launch(1, 128, "latest"), CLUSTER)
    config_map = owned_objects(NAMES, spec, CLUSTER, own_service_account=True)[0]
    template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    for each in (pod, template):
        assert restricted_violations(each) == []
        container = each["spec"]["containers"][0]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        writable = {m["mountPath"] for m in container["volumeMounts"]}
        assert {"/tmp", "/home/lockgate"} <= writable, "Spark, the JVM and the driver's work dir write there"
    assert "/tmp/lockgate" in pod["spec"]["containers"][0]["args"], "the driver's work dir is under /tmp"


def test_an_allowed_template_may_replace_the_security_context() -> None:
    context = {"runAsUser": 0, "capabilities": {"add": ["SYS_PTRACE"]}}
    spec = {**SPEC, **_template({"securityContext": {"runAsNonRoot": False}})}
    spec["podTemplate"]["spec"]["containers"] = [
        {"name": "driver", "securityContext": context},
        {"name": "executor", "securityContext": context},
    ]
    _check(spec, TRUSTING)
    pod = driver_pod(NAMES, parse_spec(spec), Launch(1, 128, "latest"), CLUSTER)
    config_map = owned_objects(NAMES, spec, CLUSTER, own_service_account=True)[0]
    template = yaml.safe_load(config_map["data"]["executor-pod-template.yaml"])
    for each in (pod, template):
        assert each["spec"]["securityContext"] == {"runAsNonRoot": False}
        assert each["spec"]["containers"][0]["securityContext"] == context


def test_a_service_account_runs_a_job_only_when_its_namespace_marked_it() -> None:
    spec = parse_spec({**SPEC, "serviceAccountName": "uploader"})
    check_service_account(spec, "team-a", {"lockgate.dev/streaming-jobs": "allowed"}, STRICT)
    with pytest.raises(SpecError, match="no such ServiceAccount in namespace team-a"):
        check_service_account(spec, "team-a", None, STRICT)
    for marks in ({}, {"lockgate.dev/streaming-jobs": "yes"}):
        with pytest.raises(SpecError) as error:
            check_service_account(spec, "team-a", marks, STRICT)
        message = str(error.value)
        assert message.startswith("spec.serviceAccountName 'uploader' is not marked for StreamingJobs")
        assert "kubectl annotate serviceaccount uploader lockgate.dev/streaming-jobs=allowed" in message
        check_service_account(spec, "team-a", marks, JobPolicy(allow_privileged_pods=True))
    check_service_account(parse_spec(SPEC), "team-a", None, STRICT)  # none named: the operator's own


@pytest.mark.parametrize(
    "key", ["spark.app.id=spark-of-team-b", "spark.kubernetes.driver.resourceNamePrefix=x"]
)
def test_a_conf_key_with_an_equals_sign_is_refused_under_any_policy(key: str) -> None:
    """spark-submit splits `--conf KEY=VALUE` at the first `=`: a key holding one
    would reach Spark as the key before it, past the checks of the whole key."""
    spec = parse_spec({**SPEC, "sparkConf": {key: "1"}})
    for policy in (STRICT, TRUSTING):
        with pytest.raises(SpecError, match=rf"spec\.sparkConf\['{key}'\]: .*'{key.partition('=')[0]}'"):
            check_job(spec, NAMES, CLUSTER, policy)


@pytest.mark.parametrize("variable", LAUNCH_ENVIRONMENT)
@pytest.mark.parametrize("container", ["driver", "executor"])
def test_an_environment_that_configures_the_jvm_or_spark_is_refused_under_any_policy(
    variable: str, container: str
) -> None:
    """`JAVA_TOOL_OPTIONS=-Dspark.app.id=…` would set what spec.sparkConf may not."""
    spec = _template(
        {"containers": [{"name": container, "env": [{"name": variable, "value": "-Dspark.app.id=x"}]}]}
    )
    for policy in (STRICT, TRUSTING):
        with pytest.raises(
            SpecError, match=rf"containers\[0\]\.env\[0\] sets {variable}, which hands the JVM"
        ):
            _check(spec, policy)


def test_the_launch_environment_is_pinned_after_what_a_secret_in_envfrom_could_set() -> None:
    """A container's env wins over its envFrom: the operator's empty values come last."""
    template = {"containers": [{"name": "driver", "envFrom": [{"secretRef": {"name": "creds"}}]}]}
    spec = parse_spec({**SPEC, "podTemplate": {"spec": template}})
    driver = driver_pod(NAMES, spec, Launch(1, 128, "latest"), CLUSTER)["spec"]["containers"][0]
    pinned = {e["name"]: e["value"] for e in driver["env"] if e["name"] in LAUNCH_ENVIRONMENT}
    assert pinned == dict.fromkeys(LAUNCH_ENVIRONMENT, "")
    executor = executor_pod_template({"podTemplate": {"spec": template}}, CLUSTER)["spec"]["containers"][0]
    assert {e["name"] for e in executor["env"]} == set(LAUNCH_ENVIRONMENT) - {"SPARK_CONF_DIR"}
