"""Finding Spark's processes under a `lockgate run`, to kill them: the
fault-injection tests' chaos monkey, which the recovery demo borrows."""

from __future__ import annotations

from pathlib import Path

from lockgate.runtime.spark.session import SPARK_DAEMON_MODULE


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, command line) of every process we can read."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        table[int(entry.name)] = (parent, cmdline)
    return table


def descendants(root: int) -> dict[int, tuple[int, str]]:
    table = _processes()
    found: dict[int, tuple[int, str]] = {}
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, cmdline) in table.items():
            if ppid == parent and pid not in found:
                found[pid] = (ppid, cmdline)
                frontier.append(pid)
    return found


def _threads(pid: int) -> int:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in status.splitlines() if line.startswith("Threads:")), 0)


# What Spark's Python daemon runs as: Lockgate's (`spark.python.daemon.module`), or
# pyspark's own in a session without Lockgate's settings.
DAEMON_MODULES = (SPARK_DAEMON_MODULE, "pyspark.daemon")


def _daemon(cmdline: str) -> bool:
    return any(f"-m {module}" in cmdline for module in DAEMON_MODULES)


def python_workers(root: int) -> list[int]:
    """Python workers forked by a pyspark daemon under `root`, running a task or idle."""
    tree = descendants(root)
    return [
        pid
        for pid, (ppid, cmdline) in tree.items()
        if _daemon(cmdline) and ppid in tree and _daemon(tree[ppid][1])
    ]


def python_task_workers(root: int) -> list[int]:
    """Python workers running tasks. A worker Spark keeps for reuse after a failed
    stage sits idle on one thread; a task runs chain, etcd and progress threads —
    killing an idle one fails nothing."""
    return [pid for pid in python_workers(root) if _threads(pid) > 1]


def executor_jvms(root: int) -> list[int]:
    return [
        pid for pid, (_, cmdline) in descendants(root).items() if "CoarseGrainedExecutorBackend" in cmdline
    ]


def working_in(directory: Path) -> list[str]:
    """The processes whose working directory is `directory` (those a run started
    there and left behind, whoever their parent is now)."""
    found = []
    for pid, (_, cmdline) in _processes().items():
        try:
            if Path(f"/proc/{pid}/cwd").resolve() == directory.resolve():
                found.append(f"{pid} {cmdline[:200]}")
        except OSError:
            continue
    return found


def listening_on(port: int) -> int | None:
    """The process with a TCP socket listening on `port` (IPv4 or IPv6), or None:
    a task's exchange port names the process that runs it."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(f"socket:[{inode}]")
    if not inodes:
        return None
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            links = [link.readlink() for link in (entry / "fd").iterdir()]
        except OSError:
            continue
        if any(str(link) in inodes for link in links):
            return int(entry.name)
    return None


def ancestor_in(pid: int, candidates: set[int]) -> int | None:
    """The nearest ancestor of `pid` (or `pid` itself) among `candidates`."""
    table = _processes()
    while pid in table:
        if pid in candidates:
            return pid
        pid = table[pid][0]
    return None
