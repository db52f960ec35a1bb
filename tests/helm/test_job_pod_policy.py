"""What a job's driver may create as pods, by the chart's ValidatingAdmissionPolicy
(its exact CEL, evaluated by tests/helm/job_pod_policy.py): the executor pods
Spark makes from the operator's template pass; a pod with another image, of the
host, privileged, as root, unconfined, under another ServiceAccount, on a
scheduler or node of its choosing is denied."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import helm_python as helm
import pytest

from tests.helm.chart import NAMESPACE, render
from tests.helm.job_pod_policy import JobPodPolicy, service_account_user
from tests.helm.job_pods import (
    ACCOUNTS,
    DEFAULT_ACCOUNT,
    DRIVER,
    IMAGE,
    NAMES,
    OTHER,
    job_driver_pod,
    spark_executor_pod,
)


@pytest.fixture(scope="module")
def policy() -> JobPodPolicy:
    return JobPodPolicy(render())


def test_the_executor_pods_spark_makes_are_admitted(policy: JobPodPolicy) -> None:
    decision = policy.decide(spark_executor_pod(), DRIVER, "streams", ACCOUNTS)
    assert decision.applies, "a job's driver asks"
    assert decision.denials == []


def test_the_policy_holds_only_jobs_drivers(policy: JobPodPolicy) -> None:
    root_pod = _changed(lambda spec: spec.update(hostNetwork=True))
    operator = service_account_user(NAMESPACE, "lockgate")
    assert not policy.decide(root_pod, operator, "streams", ACCOUNTS).applies, "the operator's own requests"
    assert not policy.decide(root_pod, "alice@example.com", "streams", ACCOUNTS).applies, (
        "people: Pod Security"
    )


@pytest.mark.parametrize(
    ("release", "values"),
    [("prod-lockgate", None), ("lockgate", {"serviceAccount": {"name": "streams-lockgate"}})],
    ids=["a release named *-lockgate", "an operator account named *-lockgate"],
)
def test_the_operators_own_driver_pods_are_not_held_whatever_its_account_is_named(
    release: str, values: dict[str, Any] | None
) -> None:
    """The policy picks job drivers' requests by their accounts' suffix `-lockgate`; the
    operator's own account has the release's name, and with a release `prod-lockgate`
    the policy denied every driver pod the operator made (not the job's own account)."""
    objects = render(values, release=release)
    (account,) = [o["metadata"]["name"] for o in objects if o["kind"] == "ServiceAccount"]
    assert account.endswith("-lockgate")
    operator = service_account_user(NAMESPACE, account)
    decision = JobPodPolicy(objects).decide(job_driver_pod(), operator, "streams", ACCOUNTS)
    assert (decision.applies, decision.denials) == (False, [])


def _changed(change: Callable[[dict[str, Any]], object], *, container: bool = False) -> dict[str, Any]:
    pod = spark_executor_pod()
    change(pod["spec"]["containers"][0] if container else pod["spec"])
    return pod


def _security(**fields: Any) -> Callable[[dict[str, Any]], object]:
    return lambda container: container["securityContext"].update(fields)


BAD_PODS: dict[str, tuple[Callable[[], dict[str, Any]], str]] = {
    "another image": (
        lambda: _changed(lambda c: c.update(image="evil:1"), container=True),
        "the job's image",
    ),
    "an init container of another image": (
        lambda: _changed(
            lambda s: s.update(initContainers=[{**s["containers"][0], "name": "i", "image": "evil:1"}])
        ),
        "the job's image",
    ),
    "hostNetwork": (lambda: _changed(lambda s: s.update(hostNetwork=True)), "host's network"),
    "hostPID": (lambda: _changed(lambda s: s.update(hostPID=True)), "host's network, PID"),
    "hostIPC": (lambda: _changed(lambda s: s.update(hostIPC=True)), "IPC namespace"),
    "a host port": (
        lambda: _changed(lambda c: c["ports"].append({"containerPort": 22, "hostPort": 22}), container=True),
        "host ports",
    ),
    "a hostPath volume": (
        lambda: _changed(lambda s: s["volumes"].append({"name": "root", "hostPath": {"path": "/"}})),
        "no hostPath",
    ),
    "an nfs volume": (
        lambda: _changed(lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}})),
        "no hostPath",
    ),
    "privileged": (lambda: _changed(_security(privileged=True), container=True), "unprivileged"),
    "privilege escalation": (
        lambda: _changed(_security(allowPrivilegeEscalation=True), container=True),
        "allowPrivilegeEscalation false",
    ),
    "no container securityContext": (
        lambda: _changed(lambda c: c.pop("securityContext"), container=True),
        "unprivileged",
    ),
    "an added capability": (
        lambda: _changed(_security(capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN"]}), container=True),
        "none added",
    ),
    "capabilities kept": (lambda: _changed(_security(capabilities={}), container=True), "every capability"),
    "runAsNonRoot false": (
        lambda: _changed(lambda s: s.update(securityContext={**s["securityContext"], "runAsNonRoot": False})),
        "runAsNonRoot true",
    ),
    "a container as uid 0": (lambda: _changed(_security(runAsUser=0), container=True), "uid 0"),
    "seccomp unconfined": (
        lambda: _changed(lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"})),
        "unconfined seccomp",
    ),
    "a container's seccomp unconfined": (
        lambda: _changed(_security(seccompProfile={"type": "Unconfined"}), container=True),
        "unconfined seccomp",
    ),
    "no seccomp profile (unconfined unless the kubelet defaults one)": (
        lambda: _changed(lambda s: s["securityContext"].pop("seccompProfile")),
        "unconfined seccomp",
    ),
    "an SELinux type of its choosing": (
        lambda: _changed(lambda s: s["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
        "SELinux",
    ),
    "a container's SELinux user and role": (
        lambda: _changed(_security(seLinuxOptions={"user": "system_u", "role": "system_r"}), container=True),
        "SELinux",
    ),
    "an unmasked /proc": (lambda: _changed(_security(procMount="Unmasked"), container=True), "/proc"),
    "a sysctl": (
        lambda: _changed(
            lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "65536"}])
        ),
        "sysctls",
    ),
    "a Windows host process": (
        lambda: _changed(_security(windowsOptions={"hostProcess": True}), container=True),
        "host process",
    ),
    "AppArmor unconfined by annotation": (
        lambda: _annotated("container.apparmor.security.beta.kubernetes.io/executor", "unconfined"),
        "AppArmor",
    ),
    "seccomp unconfined by annotation": (
        lambda: _annotated("seccomp.security.alpha.kubernetes.io/pod", "unconfined"),
        "AppArmor",
    ),
    "AppArmor unconfined": (
        lambda: _changed(_security(appArmorProfile={"type": "Unconfined"}), container=True),
        "AppArmor",
    ),
    "the operator's ServiceAccount": (
        lambda: _changed(lambda s: s.update(serviceAccountName="lockgate", serviceAccount="lockgate")),
        "its own ServiceAccount",
    ),
    "another job's ServiceAccount": (
        lambda: _changed(lambda s: s.update(serviceAccountName=OTHER.service_account)),
        "its own ServiceAccount",
    ),
    "a scheduler of its own": (lambda: _changed(lambda s: s.update(schedulerName="mine")), "scheduler"),
    "a node of its choosing": (lambda: _changed(lambda s: s.update(nodeName="control-plane")), "a node"),
}


def _annotated(key: str, value: str) -> dict[str, Any]:
    pod = spark_executor_pod()
    pod["metadata"]["annotations"] = {key: value}
    return pod


@pytest.mark.parametrize("case", BAD_PODS, ids=list(BAD_PODS))
def test_a_pod_beyond_what_the_operator_gives_executors_is_denied(policy: JobPodPolicy, case: str) -> None:
    make, reason = BAD_PODS[case]
    for operation in ("CREATE", "UPDATE"):
        decision = policy.decide(make(), DRIVER, "streams", ACCOUNTS, operation)
        assert len(decision.denials) == 1, decision.denials
        assert reason in decision.denials[0]


def test_a_driver_may_run_pods_under_its_own_account(policy: JobPodPolicy) -> None:
    own = _changed(lambda s: s.update(serviceAccountName=NAMES.service_account))
    assert policy.decide(own, DRIVER, "streams", ACCOUNTS).admitted


def test_each_driver_gets_its_own_jobs_image_only(policy: JobPodPolicy) -> None:
    orders = service_account_user("streams", OTHER.service_account)
    denied = policy.decide(spark_executor_pod(), orders, "streams", ACCOUNTS)
    assert [d for d in denied.denials if "the job's image" in d], "sums' image is not orders' image"
    theirs = _changed(lambda c: c.update(image="orders:3"), container=True)
    assert policy.decide(theirs, orders, "streams", ACCOUNTS).admitted


def test_an_account_without_the_image_annotation_gets_no_pods(policy: JobPodPolicy) -> None:
    """An operator that does not write the annotation: no image is the job's, every pod is denied."""
    bare = copy.deepcopy(ACCOUNTS[1])
    del bare["metadata"]["annotations"]
    decision = policy.decide(spark_executor_pod(), DRIVER, "streams", [DEFAULT_ACCOUNT, bare])
    assert [d for d in decision.denials if "the job's image" in d]


def test_the_operators_account_annotation_follows_the_spec_image() -> None:
    assert ACCOUNTS[1]["metadata"]["annotations"] == {"lockgate.dev/image": IMAGE}


def test_with_watched_namespaces_the_policy_holds_there_only() -> None:
    policy = JobPodPolicy(render({"operator": {"watchNamespaces": ["streams"]}}))
    bad = _changed(lambda s: s.update(hostNetwork=True))
    assert not policy.decide(bad, DRIVER, "streams", ACCOUNTS).admitted
    elsewhere = [{**a, "metadata": {**a["metadata"], "namespace": "web"}} for a in ACCOUNTS]
    user = service_account_user("web", NAMES.service_account)
    assert not policy.decide(bad, user, "web", elsewhere).applies


def test_the_policy_can_be_turned_off() -> None:
    objects = render({"jobPodPolicy": {"enabled": False}})
    assert not [o for o in objects if o["kind"].startswith("ValidatingAdmissionPolicy")]


def test_privileged_pods_with_the_policy_on_are_refused_at_install() -> None:
    """The operator lets a job's template loosen its pods with allowPrivilegedPods, and
    the policy then denied the very executors Spark made from it: the job waited for
    executors that never came. The chart says so at install instead."""
    with pytest.raises(
        helm.HelmRenderError, match=r"operator\.allowPrivilegedPods .* jobPodPolicy\.enabled=false"
    ):
        render({"operator": {"allowPrivilegedPods": True}})
    assert not [
        o
        for o in render({"operator": {"allowPrivilegedPods": True}, "jobPodPolicy": {"enabled": False}})
        if o["kind"].startswith("ValidatingAdmissionPolicy")
    ]
