"""Kubernetes Pod Security Standards, the "restricted" profile, as the API server's
admission enforces them (v1.30 rules), for a pod or pod template: what a namespace
labelled `pod-security.kubernetes.io/enforce: restricted` would refuse. The
emulated API server enforces none of it, so the tests check the pods themselves."""

from __future__ import annotations

from typing import Any

_RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Every rule of the restricted profile `pod` breaks (empty: it is admitted)."""
    spec = pod.get("spec") or {}
    pod_context = spec.get("securityContext") or {}
    problems = [f"spec.{field}" for field in ("hostNetwork", "hostPID", "hostIPC") if spec.get(field)]
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= _RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']}: {sorted(kinds)}")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for container in containers:
        problems += [f"container {container.get('name')}: {p}" for p in _container(container, pod_context)]
    if pod_context.get("runAsUser") == 0:
        problems.append("spec.securityContext.runAsUser 0")
    if (pod_context.get("seccompProfile") or {}).get("type") == "Unconfined":
        problems.append("spec.securityContext.seccompProfile Unconfined")
    return problems


def _container(container: dict[str, Any], pod_context: dict[str, Any]) -> list[str]:
    context = container.get("securityContext") or {}
    problems = []
    if context.get("privileged"):
        problems.append("privileged")
    if context.get("allowPrivilegeEscalation") is not False:
        problems.append("allowPrivilegeEscalation is not false")
    capabilities = context.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        problems.append("capabilities do not drop ALL")
    if set(capabilities.get("add") or []) - {"NET_BIND_SERVICE"}:
        problems.append(f"capabilities add {capabilities['add']}")
    if context.get("runAsNonRoot", pod_context.get("runAsNonRoot")) is not True:
        problems.append("runAsNonRoot is not true")
    if context.get("runAsUser") == 0:
        problems.append("runAsUser 0")
    seccomp = context.get("seccompProfile") or pod_context.get("seccompProfile") or {}
    if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
        problems.append("seccompProfile is not RuntimeDefault or Localhost")
    if any(port.get("hostPort") for port in container.get("ports") or []):
        problems.append("hostPort")
    return problems
