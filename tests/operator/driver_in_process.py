"""The kubelet of a driver pod the operator created, in this process: the pod's own
driver arguments, its ConfigMap and Secret where it mounts them, and the real
driver — its preflight, its job master, the status it records in etcd — with
one difference: the launch's tasks run as threads (`ThreadStage`) in place of
Spark's barrier stage, so that a test takes seconds, not a JVM's start-up."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from lockgate.operator.driver_pod import CONFIG_DIR, MANIFEST_FILE, SNAPSHOT_KEY_DIR, SNAPSHOT_KEY_FILE
from lockgate.runtime.coordination import etcd_options
from lockgate.runtime.driver.__main__ import REFUSED_OR_BAD_ETCD_OPTIONS, parser
from lockgate.runtime.driver.drive import drive
from lockgate.runtime.driver.options import settings_from
from lockgate.runtime.driver.preflight import preflight
from lockgate.runtime.engine.in_process import ThreadStage
from lockgate.runtime.engine.job_spec import JobSpec

from tests.operator.cluster_helpers import NAMESPACE, driver_args
from tests.operator.fake_kube import FakeKube

SCRATCH = "/tmp/lockgate"  # the driver's --work-dir in its pod
DROPPED = ("--metrics-port",)  # a fixed port, which drivers of one host cannot share


class CountingStage(ThreadStage):
    """Counts the launches of the job's tasks (the job master's, across its restarts)."""

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0

    def run(self, spec: JobSpec) -> None:
        self.launches += 1
        super().run(spec)


def _mounted(kube: FakeKube, pod: dict[str, Any], root: Path) -> dict[str, Path]:
    """The pod's ConfigMap and snapshot key Secret as files under `root`, by mount path."""
    volumes = {volume["name"]: volume for volume in pod["spec"]["volumes"]}
    mounts = {m["mountPath"]: volumes[m["name"]] for m in pod["spec"]["containers"][0]["volumeMounts"]}
    config = kube.objects["ConfigMap", NAMESPACE, mounts[CONFIG_DIR]["configMap"]["name"]]
    key = kube.objects["Secret", NAMESPACE, mounts[SNAPSHOT_KEY_DIR]["secret"]["secretName"]]
    paths = {CONFIG_DIR: root / "config", SNAPSHOT_KEY_DIR: root / "key", SCRATCH: root / "scratch"}
    for path in paths.values():
        path.mkdir(parents=True, exist_ok=True)
    (paths[CONFIG_DIR] / MANIFEST_FILE).write_text(config["data"][MANIFEST_FILE])
    (paths[SNAPSHOT_KEY_DIR] / SNAPSHOT_KEY_FILE).write_text(key["stringData"][SNAPSHOT_KEY_FILE])
    return paths


def _local(argument: str, paths: dict[str, Path]) -> str:
    for mount, local in paths.items():
        if argument == mount or argument.startswith(f"{mount}/"):
            return f"{local}{argument[len(mount) :]}"
    return argument


def driver_argv(kube: FakeKube, pod_name: str, root: Path) -> list[str]:
    """The driver's arguments as the pod gives them, its mounts under `root`."""
    pod = kube.objects["Pod", NAMESPACE, pod_name]
    paths = _mounted(kube, pod, root / pod_name)
    arguments = driver_args(pod)
    arguments = arguments[arguments.index("--") + 1 :]
    kept: list[str] = []
    for flag, argument in zip(["", *arguments[:-1]], arguments, strict=True):
        if argument not in DROPPED and flag not in DROPPED:
            kept.append(_local(argument, paths))
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    return [*kept, "--etcd", str(env["LOCKGATE_ETCD"])]


async def run_driver_pod(kube: FakeKube, pod_name: str, root: Path, stage: ThreadStage) -> int:
    """Run the driver of pod `pod_name` to its end, as `python -m lockgate.runtime.driver`
    does, and report the pod's phase by its exit code (0 Succeeded, else Failed)."""
    await kube.set_pod_phase(pod_name, "Running")
    arguments = parser().parse_args(driver_argv(kube, pod_name, root))
    code = 0
    try:
        settings = settings_from(arguments, Path(arguments.work_dir), fresh_by_default=False)
        etcd_config = etcd_options.config_of(arguments.etcd, arguments)
        await asyncio.to_thread(preflight, settings, etcd_config)  # it runs its own event loop
        await drive(settings, etcd_config, stage)
    except REFUSED_OR_BAD_ETCD_OPTIONS:
        code = 2
    except Exception:  # noqa: BLE001 - the driver's exit 1: its status says why
        code = 1
    await kube.set_pod_phase(pod_name, "Succeeded" if code == 0 else "Failed")
    return code
