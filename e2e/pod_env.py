"""A container's environment as the kubelet makes it: `env` with its values,
the downward API (`fieldRef`) and keys of ConfigMaps and Secrets, `envFrom`,
and `$(NAME)` references to variables defined before, which the kubelet also
expands in the command and arguments."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

ReadData = Callable[[str, str], Awaitable[dict[str, str] | None]]
"""(kind: "configMap" | "secret", name) -> its data (Secrets decoded), None when there is none."""

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_SUBSCRIPT = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


class MissingSourceError(Exception):
    """A ConfigMap or Secret the pod needs (in its environment or a volume) does not exist yet:
    the kubelet keeps the pod waiting, as it does."""


def expand(text: str, variables: Mapping[str, str]) -> str:
    """`$(NAME)` replaced by the variable's value when it is defined; `$$` is a `$`."""

    def replace(match: re.Match[str]) -> str:
        if match[0] == "$$":
            return "$"
        return variables.get(match[1], match[0])

    return _REFERENCE.sub(replace, text)


def field_value(pod: dict[str, Any], path: str, pod_ip: str) -> str:
    """The downward API's fields, with the pod IP the runner gives the pod."""
    metadata, spec = pod["metadata"], pod["spec"]
    fields = {
        "metadata.name": metadata["name"],
        "metadata.namespace": metadata.get("namespace", ""),
        "metadata.uid": metadata.get("uid", ""),
        "spec.nodeName": spec.get("nodeName", "localhost"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": pod_ip,
        "status.podIPs": pod_ip,
        "status.hostIP": "127.0.0.1",
    }
    if path in fields:
        return str(fields[path])
    if match := _SUBSCRIPT.match(path):
        return str((metadata.get(match[1]) or {}).get(match[2], ""))
    raise ValueError(f"pod {metadata['name']}: the downward API field {path!r} is not emulated here")


async def _key(read: ReadData, kind: str, reference: dict[str, Any]) -> str | None:
    data = await read(kind, reference["name"])
    if data is None or reference["key"] not in data:
        if reference.get("optional"):
            return None
        raise MissingSourceError(f"{kind} {reference['name']} (key {reference['key']})")
    return data[reference["key"]]


async def _value(pod: dict[str, Any], source: dict[str, Any], pod_ip: str, read: ReadData) -> str | None:
    if "fieldRef" in source:
        return field_value(pod, source["fieldRef"]["fieldPath"], pod_ip)
    if "configMapKeyRef" in source:
        return await _key(read, "configMap", source["configMapKeyRef"])
    if "secretKeyRef" in source:
        return await _key(read, "secret", source["secretKeyRef"])
    raise ValueError(f"pod {pod['metadata']['name']}: env source {sorted(source)} is not emulated here")


async def container_env(
    pod: dict[str, Any], container: dict[str, Any], pod_ip: str, read: ReadData
) -> dict[str, str]:
    """`envFrom` first, then `env` (which wins), each value expanded against those before it."""
    env: dict[str, str] = {}
    for source in container.get("envFrom") or []:
        kind = "configMap" if "configMapRef" in source else "secret"
        reference = source.get("configMapRef") or source.get("secretRef") or {}
        data = await read(kind, reference["name"])
        if data is None and not reference.get("optional"):
            raise MissingSourceError(f"{kind} {reference['name']}")
        prefix = source.get("prefix", "")
        env.update({f"{prefix}{key}": value for key, value in (data or {}).items()})
    for variable in container.get("env") or []:
        if "valueFrom" in variable:
            value = await _value(pod, variable["valueFrom"], pod_ip, read)
            if value is not None:
                env[variable["name"]] = value
        else:
            env[variable["name"]] = expand(variable.get("value", ""), env)
    return env
