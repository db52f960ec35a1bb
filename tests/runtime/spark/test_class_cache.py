"""The local driver JVM's class cache (spark/class_cache.py): written once by a run
whose JVM exited cleanly, mapped by the runs after it, and never trusted when
damaged: a damaged archive is discarded and written again, and a JVM that
will not start with one starts without it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from lockgate.runtime.spark.class_cache import QUIET_DUMP, UNUSED_DAYS, ClassCache
from lockgate.runtime.spark.session import local_class_cache

from tests.process_tree import working_in
from tests.runtime.recovery.lockgate_process import committed_count, start, wait_for

ARCHIVE_BYTES = b"archive " * 4096


def _cache(root: Path) -> ClassCache:
    cache = ClassCache.under(root)
    assert cache is not None, "the suite runs with Java"
    return cache


def _published(cache: ClassCache) -> ClassCache:
    options, dumping = cache.jvm_options()
    assert dumping
    assert options == f"-XX:ArchiveClassesAtExit={cache.pending} {QUIET_DUMP}"
    cache.pending.write_bytes(ARCHIVE_BYTES)
    assert cache.publish(0)
    return cache


def test_an_archive_is_published_only_by_a_jvm_that_exited_cleanly(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    cache.jvm_options()
    cache.pending.write_bytes(ARCHIVE_BYTES[:100])  # a JVM killed while dumping
    assert not cache.publish(-9)
    assert not cache.pending.exists()
    assert not cache.archive.exists()
    _published(cache)
    assert cache.jvm_options() == (f"-XX:SharedArchiveFile={cache.archive}", False)


def test_a_truncated_or_changed_archive_is_discarded_and_written_again(tmp_path: Path) -> None:
    cache = _published(_cache(tmp_path))
    cache.archive.chmod(0o644)
    cache.archive.write_bytes(ARCHIVE_BYTES[:-1])
    assert not cache.usable()
    assert not cache.archive.exists()
    _published(cache)
    cache.archive.chmod(0o644)
    with open(cache.archive, "r+b") as archive:
        archive.seek(1000)
        archive.write(b"X")
    options, dumping = cache.jvm_options()
    assert dumping, options


def test_what_killed_runs_left_and_archives_unused_for_a_month_are_removed(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    directory = cache.archive.parent
    directory.mkdir(parents=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    unused = [directory / "driver-0000000000000000.jsa", directory / "driver-0000000000000000.check"]
    in_use = [directory / "driver-1111111111111111.jsa", directory / "driver-1111111111111111.check"]
    leftovers = [directory / f"{cache.archive.stem}.{dead.pid}.pending", *unused]
    for path in [*leftovers, *in_use]:
        path.write_bytes(b"x")
    month_ago = time.time() - (UNUSED_DAYS + 1) * 86400
    os.utime(unused[1], (month_ago, month_ago))  # another install's, last used a month ago
    running = directory / f"{cache.archive.stem}.1.pending"  # pid 1 is alive
    running.write_bytes(b"x")
    cache.jvm_options()
    assert [p for p in leftovers if p.exists()] == []
    assert all(p.exists() for p in [*in_use, running]), "another install's, in use; a dump under way"


def test_a_cache_directory_that_cannot_be_used_means_no_cache_said_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for unusable in (tmp_path / "with space", Path("/proc/lockgate")):
        monkeypatch.setenv("LOCKGATE_CACHE_DIR", str(unusable))
        assert local_class_cache() == (None, "", False)
        said = capsys.readouterr().err
        assert said.startswith("no class cache for Spark's JVM"), said
        assert said.count("\n") == 1


def _run(cwd: Path, cache_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    cwd.mkdir()
    return start(
        cwd,
        "run",
        "tests.jobs.configurable:running_sum",
        "--arg",
        f"output=file://{cwd}/out",
        *args,
        env={"LOCKGATE_CACHE_DIR": str(cache_dir), **(env or {})},
    )


def _bounded_run(cwd: Path, cache_dir: Path, env: dict[str, str] | None = None) -> str:
    run = _run(cwd, cache_dir, "--bounded", "--arg", "count=200", env=env)
    _, err = run.communicate(timeout=240)
    assert run.returncode == 0, err[-3000:]
    return err


def test_the_first_local_run_writes_the_archive_the_next_map_it_and_survive_its_damage(
    tmp_path: Path,
) -> None:
    cache = _cache(tmp_path / "cache")
    err = _bounded_run(tmp_path / "first", tmp_path / "cache")
    assert f"saving Spark's JVM classes in {cache.archive}" in err
    assert "[cds]" not in err, "the dump's warnings about each class it left out reached the terminal"
    assert cache.usable()

    second = _run(tmp_path / "second", tmp_path / "cache", "--arg", "count=unbounded", "--arg", "rate=500")
    try:
        wait_for(lambda: committed_count(f"file://{tmp_path}/second/out") > 0, "committed output", second)
        jvms = [line.split()[0] for line in working_in(tmp_path / "second") if "java" in line]
        assert len(jvms) == 1, jvms
        assert str(cache.archive) in Path(f"/proc/{jvms[0]}/maps").read_text()
    finally:
        second.send_signal(signal.SIGTERM)
        _, err = second.communicate(timeout=120)
    assert "saving Spark's JVM classes" not in err

    # A truncated archive crashes the JVM; here it is recorded as whole, as if
    # damaged in a way the size and CRC check cannot see.
    whole = cache.archive.read_bytes()
    cache.pending.write_bytes(whole[: len(whole) // 4])
    assert cache.publish(0)
    err = _bounded_run(tmp_path / "third", tmp_path / "cache")
    assert f"Spark's JVM did not start with {cache.archive}; discarded it" in err
    assert not cache.archive.exists()


def test_a_jvm_that_cannot_write_an_archive_runs_without_and_is_not_asked_again(tmp_path: Path) -> None:
    no_base_archive = {"JAVA_TOOL_OPTIONS": "-Xshare:off"}  # a JVM then refuses to dump one
    err = _bounded_run(tmp_path / "first", tmp_path / "cache", no_base_archive)
    assert "Spark's JVM cannot write a class archive here; runs start without one" in err
    err = _bounded_run(tmp_path / "second", tmp_path / "cache", no_base_archive)
    assert "class archive" not in err
    assert "saving Spark's JVM classes" not in err


def test_a_jvm_failing_for_another_reason_ends_the_run_saying_so_and_the_archive_is_kept(
    tmp_path: Path,
) -> None:
    cache = _published(_cache(tmp_path / "cache"))
    broken = {"JAVA_TOOL_OPTIONS": "-XX:+NoSuchLockgateOption"}
    run = _run(tmp_path / "run", tmp_path / "cache", "--bounded", "--arg", "count=10", env=broken)
    _, err = run.communicate(timeout=240)
    assert run.returncode == 1, err[-3000:]
    assert "Unrecognized VM option 'NoSuchLockgateOption'" in err, "the JVM's own message was hidden"
    assert err.splitlines()[-1].startswith("lockgate run: Spark's JVM did not start (JAVA_GATEWAY_EXITED;"), (
        err
    )
    assert "Traceback" not in err
    assert cache.usable(), "the archive was discarded although the JVM failed without it too"


def test_only_the_archive_of_the_install_used_before_this_one_is_kept(tmp_path: Path) -> None:
    cache = _cache(tmp_path)
    directory = cache.archive.parent
    directory.mkdir(parents=True)
    now = time.time()
    for age, stem in enumerate(
        ("driver-2222222222222222", "driver-3333333333333333", "driver-4444444444444444")
    ):
        for suffix in (".jsa", ".check"):
            (directory / f"{stem}{suffix}").write_bytes(b"x")
        os.utime(directory / f"{stem}.check", (now - 60 * (age + 1), now - 60 * (age + 1)))
    _published(cache)
    cache.jvm_options()
    assert sorted(p.stem for p in directory.glob("*.jsa")) == sorted(
        [cache.archive.stem, "driver-2222222222222222"]
    )
    assert not list(directory.glob("driver-3333333333333333.*")), "the older installs' records go too"
