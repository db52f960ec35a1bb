from tests.runtime.coordination.conftest import etcd_server, keys

__all__ = ["etcd_server", "keys"]
