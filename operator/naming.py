"""Names and labels of the objects the operator owns for one StreamingJob."""

from __future__ import annotations

from dataclasses import dataclass

GROUP, VERSION, PLURAL, KIND = "lockgate.dev", "v1alpha1", "streamingjobs", "StreamingJob"
API_VERSION = f"{GROUP}/{VERSION}"
JOB_LABEL = "lockgate.dev/job"
COMPONENT_LABEL = "app.kubernetes.io/component"


@dataclass(frozen=True)
class JobNames:
    """One job's object names; `generation` tells successive drivers apart."""

    namespace: str
    name: str

    @property
    def qualified(self) -> str:
        """`namespace/name`, as the job's metrics and `status.jobId` name it."""
        return f"{self.namespace}/{self.name}"

    @property
    def service_account(self) -> str:
        return f"{self.name}-lockgate"

    @property
    def role(self) -> str:
        return f"{self.name}-lockgate-driver"

    @property
    def config_map(self) -> str:
        return f"{self.name}-lockgate-job"

    @property
    def snapshot_key(self) -> str:
        """The Secret with the key that signs the job's snapshots."""
        return f"{self.name}-lockgate-snapshot-key"

    @property
    def etcd_credentials(self) -> str:
        """The Secret with the password of the job's own etcd user, new each launch."""
        return f"{self.name}-lockgate-etcd"

    @property
    def service(self) -> str:
        """The driver's headless Service: executors reach the driver by this name."""
        return f"{self.name}-driver"

    def driver_pod(self, launch: int) -> str:
        """Each launch gets a new pod name, so a replaced driver never collides with the old one."""
        return f"{self.name}-driver-{launch}"

    def labels(self, component: str) -> dict[str, str]:
        return {
            "app.kubernetes.io/name": "lockgate",
            "app.kubernetes.io/instance": self.name,
            "app.kubernetes.io/managed-by": "lockgate-operator",
            COMPONENT_LABEL: component,
            JOB_LABEL: self.name,
        }

    @property
    def executor_selector(self) -> str:
        """status.selector of the scale subresource: the job's executor pods."""
        return f"{JOB_LABEL}={self.name},{COMPONENT_LABEL}=executor"
