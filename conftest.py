"""Plugins for every test of the repository, under tests/ and e2e/ alike."""

pytest_plugins = ["tests.task_leaks", "tests.etcd_fixtures"]
