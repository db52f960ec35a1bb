from tests.runtime.coordination.conftest import etcd, etcd_config, etcd_server, keys

__all__ = ["etcd", "etcd_config", "etcd_server", "keys"]
