"""A job's pods as they reach the API server: the driver pod the operator makes,
the ServiceAccounts it writes, and the executor pods Spark's driver makes from the
operator's template and conf."""

from __future__ import annotations

import copy
from typing import Any

from lockgate.operator.driver_pod import Cluster, Launch, driver_pod, spark_conf
from lockgate.operator.naming import JobNames
from lockgate.operator.owned import executor_pod_template, owned_objects
from lockgate.operator.spec import parse_spec

from tests.helm.job_pod_policy import service_account_user

NAMES = JobNames("streams", "sums")
OTHER = JobNames("streams", "orders")
IMAGE = "registry.example/sums:7"
CLUSTER = Cluster(
    "https://lockgate-etcd.lockgate-system.svc:2379", "s3://bucket/lockgate", "lockgate-etcd-client"
)
SPEC: dict[str, Any] = {
    "image": IMAGE,
    "job": {"entrypoint": "jobs.sums:build"},
    "replicas": 2,
    "maxParallelism": 64,
    "volumes": [{"name": "reference", "persistentVolumeClaim": {"claimName": "reference-data"}}],
    "volumeMounts": [{"name": "reference", "mountPath": "/data"}],
    "podTemplate": {"spec": {"nodeSelector": {"pool": "streams"}, "tolerations": [{"operator": "Exists"}]}},
}
LAUNCH = Launch(3, 64, "latest")
DRIVER = service_account_user("streams", NAMES.service_account)


def _service_account(names: JobNames, spec: dict[str, Any]) -> dict[str, Any]:
    """The job's ServiceAccount as the operator writes it."""
    objects = owned_objects(names, spec, CLUSTER, own_service_account=True)
    (account,) = [o for o in objects if o["kind"] == "ServiceAccount"]
    return account


DEFAULT_ACCOUNT = {
    "apiVersion": "v1",
    "kind": "ServiceAccount",
    "metadata": {"name": "default", "namespace": "streams"},
}
ACCOUNTS = [
    DEFAULT_ACCOUNT,
    _service_account(NAMES, SPEC),
    _service_account(OTHER, {**SPEC, "image": "orders:3"}),
]


def job_driver_pod() -> dict[str, Any]:
    return driver_pod(NAMES, parse_spec(SPEC), LAUNCH, CLUSTER)


def spark_executor_pod(number: int = 1) -> dict[str, Any]:
    """An executor pod as Spark 3.5's KubernetesExecutorBuilder makes it from the
    operator's template and conf (BasicExecutorFeatureStep, MountLocalDirsFeatureStep,
    the executor conf ConfigMap), with what the API server adds before validating
    admission (the ServiceAccount plugin's token volume, defaults)."""
    conf = spark_conf(NAMES, parse_spec(SPEC), LAUNCH)
    template = executor_pod_template(SPEC, CLUSTER)
    pod = copy.deepcopy(template)
    name = f"{conf['spark.kubernetes.executor.podNamePrefix']}-exec-{number}"
    labels = {
        k.removeprefix("spark.kubernetes.executor.label."): v for k, v in conf.items() if ".label." in k
    }
    spark_labels = {"spark-app-selector": "spark-1", "spark-exec-id": str(number), "spark-role": "executor"}
    pod["metadata"] = {
        "name": name,
        "namespace": "streams",
        "labels": {**labels, **spark_labels, "spark-exec-resourceprofile-id": "0"},
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "sums-driver-3", "uid": "u-1"}],
    }
    spec = pod["spec"]
    (container,) = spec["containers"]
    container.update(
        image=conf["spark.kubernetes.container.image"],
        imagePullPolicy=conf["spark.kubernetes.container.image.pullPolicy"],
        args=["executor"],
        resources={"requests": {"cpu": "1", "memory": "1408Mi"}, "limits": {"memory": "1408Mi"}},
        env=[
            {"name": "SPARK_EXECUTOR_ID", "value": str(number)},
            {"name": "SPARK_EXECUTOR_POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "_SPARK_AUTH_SECRET", "value": "s3cr3t"},
            {"name": "SPARK_LOCAL_DIRS", "value": "/var/data/spark-1"},
        ],
    )
    container["ports"] = [
        *container["ports"],
        {"name": "blockmanager", "containerPort": 7079, "protocol": "TCP"},
    ]
    container["volumeMounts"] += [
        {"name": "spark-local-dir-1", "mountPath": "/var/data/spark-1"},
        {"name": "spark-conf-volume-exec", "mountPath": "/opt/spark/conf"},
        {
            "name": "kube-api-access-x1",
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            "readOnly": True,
        },
    ]
    spec["volumes"] += [
        {"name": "spark-local-dir-1", "emptyDir": {}},
        {"name": "spark-conf-volume-exec", "configMap": {"name": "spark-exec-1-conf-map"}},
        {
            "name": "kube-api-access-x1",
            "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]},
        },
    ]
    spec.update(
        hostname=name,
        restartPolicy="Never",
        serviceAccountName="default",
        serviceAccount="default",
        schedulerName="default-scheduler",
        dnsPolicy="ClusterFirst",
        enableServiceLinks=True,
    )
    return pod
