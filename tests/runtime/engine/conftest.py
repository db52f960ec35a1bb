from tests.runtime.coordination.conftest import etcd, etcd_config, etcd_server, keys, own_etcd

__all__ = ["etcd", "etcd_config", "etcd_server", "keys", "own_etcd"]
