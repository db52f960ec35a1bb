from tests.runtime.coordination.conftest import etcd, etcd_config, etcd_server, job, keys

__all__ = ["etcd", "etcd_config", "etcd_server", "job", "keys"]
