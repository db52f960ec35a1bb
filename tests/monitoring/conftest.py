from tests.operator.conftest import cluster
from tests.runtime.coordination.conftest import etcd, etcd_config, etcd_server, keys

__all__ = ["cluster", "etcd", "etcd_config", "etcd_server", "keys"]
