"""Spark sessions set up for Lockgate's long-running barrier stages."""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

from lockgate.runtime.spark.class_cache import ClassCache, cache_root
from lockgate.runtime.spark.jvm_stderr import sifted_stderr
from pyspark import SparkContext
from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

SPARK_DAEMON_MODULE = "lockgate.runtime.spark_daemon"

T = TypeVar("T")

LOCKGATE_CONF = {
    # A failed task must fail the stage at once: the job master relaunches it
    # from the latest checkpoint. A Spark-side retry would relaunch it from the
    # restore point of the failed launch and replay what was already committed.
    "spark.task.maxFailures": "1",
    "spark.stage.maxConsecutiveAttempts": "1",
    # After an executor is lost, wait for replacements (up to a minute) before
    # launching a barrier stage that needs all of its slots.
    "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "1s",
    "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "60",
    "spark.ui.showConsoleProgress": "false",
    "spark.python.worker.faulthandler.enabled": "true",
    # pyspark compiled once, not from Spark's zip at each daemon's start (spark_daemon.py).
    "spark.python.daemon.module": SPARK_DAEMON_MODULE,
}


def spark_session(
    master: str | None = None, app_name: str = "lockgate", conf: Mapping[str, str] | None = None
) -> SparkSession:
    """A session with Lockgate's settings; `master` None keeps spark-submit's."""
    # Python workers run this interpreter, with the driver's import path, so
    # that job modules importable here are importable in the tasks.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    paths = [p for p in sys.path if p] + [os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if p))
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    return builder.config(map={**LOCKGATE_CONF, **(conf or {})}).getOrCreate()


STDERR_DRAIN_S = 2.0  # the JVM's Python workers may hold its standard error a moment longer
QUIET_LOG4J = "-Dlog4j2.configurationFile=" + str(Path(__file__).with_name("log4j2-quiet.properties"))
"""Spark's driver JVM logs errors only (its start-up warnings are noise to a job's author)."""


# A local driver's JVM only schedules: records flow between the Python workers, never
# through it. So its JIT's peak speed does not matter and its start does: C1 alone and
# the serial collector start the session about 0.6 s sooner (docs/benchmarks.md).
def quick_start_jvm(extra_options: str = "") -> dict[str, str]:
    """The local driver JVM's options, with `extra_options` (the class cache's)."""
    return {
        "spark.driver.extraJavaOptions": f"-XX:TieredStopAtLevel=1 -XX:+UseSerialGC {extra_options}".strip()
    }


def local_session(slots: int, app_name: str) -> SparkSession:
    """A `local[slots]` session. A barrier stage needs all P slots at once, so
    `slots` must be at least the parallelism (more slots than cores is fine:
    Lockgate's tasks are long-running threads, not CPU-bound batch tasks)."""
    return spark_session(f"local[{slots}]", app_name, {"spark.ui.enabled": "false", **quick_start_jvm()})


def stop_with_jvm(spark: SparkSession, timeout_s: float = 60.0) -> int | None:
    """Stop `spark` and the driver JVM this process launched for it, and wait for
    that JVM to exit: otherwise it exits only after this process does (it watches
    its stdin), and a command that has returned may leave it running for a while.
    A JVM that has not exited after `timeout_s` is killed. Returns its exit code
    (None when this process did not launch it)."""
    spark.stop()
    gateway = SparkContext._gateway
    process: subprocess.Popen[bytes] | None = getattr(gateway, "proc", None)
    if gateway is None or process is None:  # a driver under spark-submit: the JVM is our parent
        return None
    SparkContext._gateway = None
    SparkContext._jvm = None
    gateway.shutdown()
    if process.stdin is not None:
        process.stdin.close()  # the JVM's signal to exit
    try:
        return process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


TASK_FAILURE_REPORTERS = ("org.apache.spark.executor.Executor", "org.apache.spark.scheduler.TaskSetManager")
"""Spark's loggers that report a failed task with its whole Python and Java stack."""

STOPPING_REPORTERS = ("org.apache.spark.scheduler.TaskSchedulerImpl",)
"""Spark's logger that, while the session stops, reports the kills of the tasks the
stop ends with a Java stack (a kill arriving after its result thread pool stopped)."""


class SparkStartError(RuntimeError):
    """Spark's driver JVM did not start; what the JVM said is on stderr above."""

    def __init__(self, error: PySparkRuntimeError) -> None:
        super().__init__(
            f"Spark's JVM did not start ({error.getCondition()}; its own message is above): check that "
            "`java -version` shows Java 17 or newer, and JAVA_HOME and JAVA_TOOL_OPTIONS"
        )


@contextlib.contextmanager
def command_session(
    master: str,
    app_name: str,
    *,
    on_stop: Callable[[], None],
    task_failures_logged: bool = False,
    ui_port: int | None = None,
    spark_warnings: bool = False,
) -> Iterator[SparkSession]:
    """The Spark session of a command that launches its own driver JVM (`lockgate
    run`), stopped with that JVM at the end, after `on_stop`. Spark's own reports of
    a failed task (its Python traceback again, inside Java's) are not logged unless
    `task_failures_logged`: the command shows the failure. Spark's web UI is served
    on `ui_port` if one is given (None: off). Spark's own warnings as its JVM starts
    are shown only with `spark_warnings` (errors always are). A `local` driver
    starts from the class cache (class_cache.py), which the first local run
    writes as its JVM exits. The JVM's start and stop are not cut short by Ctrl-C
    (`uninterrupted`): an interrupt meanwhile stops the JVM once it is up, then is
    raised (KeyboardInterrupt)."""
    local = master.startswith("local[") or master == "local"
    cache, options, dumping = local_class_cache() if local else (None, "", False)
    ui = (
        {"spark.ui.enabled": "false"}
        if ui_port is None
        else {"spark.ui.enabled": "true", "spark.ui.port": str(ui_port)}
    )
    quiet = "" if spark_warnings else QUIET_LOG4J
    if local:
        # Spark warns that the host's name resolves to a loopback address, and binds
        # elsewhere: a local run's JVM and tasks are all on this machine.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    java = (
        quick_start_jvm(f"{options} {quiet}".strip()) if local else {"spark.driver.extraJavaOptions": quiet}
    )
    conf = {**ui, **java}
    level = os.environ.get("LOCKGATE_LOG_LEVEL")
    if level:  # executors that do not inherit this process's environment (a cluster's)
        conf["spark.executorEnv.LOCKGATE_LOG_LEVEL"] = level
    started = _Started(cache, dumping, quiet)

    def stop(spark: SparkSession) -> None:
        if started.dumping:
            saving = f"saving Spark's JVM classes in {started.archive} for faster starts (once)"
            print(saving, file=sys.stderr)
            started.publish(stop_with_jvm(spark))
        else:
            stop_with_jvm(spark)

    sifting = contextlib.nullcontext(None) if spark_warnings else sifted_stderr()
    with sifting as copier:
        spark = uninterrupted(lambda: started.session(master, app_name, conf), undo=stop)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        if not task_failures_logged:
            _silence(spark, TASK_FAILURE_REPORTERS)
        yield spark
    finally:
        try:
            if not task_failures_logged:
                _silence(spark, STOPPING_REPORTERS)
            on_stop()
        finally:
            uninterrupted(lambda: stop(spark))
            if copier is not None:  # what the JVM wrote as it stopped is out before the command's last word
                copier.join(STDERR_DRAIN_S)


class _Started:
    """Spark's JVM started from the class cache `cache` (None: without one), which it
    writes as it exits if `dumping`; started again without it where it cannot."""

    def __init__(self, cache: ClassCache | None, dumping: bool, java_options: str) -> None:
        self._cache, self.dumping = cache, dumping
        self._java_options = java_options  # the JVM's own, kept when the cache's are dropped

    @property
    def archive(self) -> Path | None:
        return None if self._cache is None else self._cache.archive

    def publish(self, jvm_exit_code: int | None) -> None:
        if self._cache is not None:
            self._cache.publish(jvm_exit_code)

    def session(self, master: str, app_name: str, conf: dict[str, str]) -> SparkSession:
        try:
            return spark_session(master, app_name, conf)
        except PySparkRuntimeError as error:
            cache = self._cache
            if cache is None:
                raise SparkStartError(error) from error
            again = "Spark's JVM did not start; starting it once more, without the class cache"
            print(again, file=sys.stderr)
            try:
                spark = spark_session(master, app_name, {**conf, **quick_start_jvm(self._java_options)})
            except PySparkRuntimeError as second:
                raise SparkStartError(second) from second  # not the cache's fault: it is kept
            if self.dumping:
                cache.mark_unsupported("the JVM did not start when asked to write a class archive")
                unsupported = "Spark's JVM cannot write a class archive here; runs start without one"
                print(unsupported, file=sys.stderr)
            else:
                cache.discard()
                print(f"Spark's JVM did not start with {cache.archive}; discarded it", file=sys.stderr)
            self._cache, self.dumping = None, False
            return spark


def uninterrupted(work: Callable[[], T], undo: Callable[[T], object] | None = None) -> T:
    """`work`'s result, `work` run to its end in a thread of its own even if Ctrl-C
    comes meanwhile. Python raises KeyboardInterrupt wherever the main thread is: in
    pyspark's launch of the JVM it removes the directory the JVM is about to write
    its address to, and the JVM, failing, stays up on its gateway's thread with no
    one to stop it. On an interrupt this waits for `work` to end, passes what it
    returned to `undo`, likewise uninterrupted, then raises KeyboardInterrupt. (A
    session made off the main thread also leaves out pyspark's SIGINT handler, which
    calls into the JVM from inside the handler.)"""
    outcome: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        try:
            outcome.set_result(work())
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread
            outcome.set_exception(error)

    threading.Thread(target=run, name="lockgate-spark-start-stop", daemon=True).start()
    interrupted = False
    while True:
        try:
            result = outcome.result()
            break
        except KeyboardInterrupt:  # raised in this (the main) thread only: never `work`'s
            interrupted = True  # `work` goes on; the interrupt is acted on once it ended
        except BaseException:
            if interrupted:
                raise KeyboardInterrupt from None
            raise
    if interrupted:
        if undo is not None:
            uninterrupted(lambda: undo(result))
        raise KeyboardInterrupt
    return result


def _silence(spark: SparkSession, loggers: tuple[str, ...]) -> None:
    log4j = spark.sparkContext._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
    for logger in loggers:
        log4j.core.config.Configurator.setLevel(logger, log4j.Level.OFF)


def local_class_cache() -> tuple[ClassCache | None, str, bool]:
    """The class cache for a local driver, its JVM options and whether the JVM
    writes it; no cache (said once) where the cache directory cannot be used."""
    try:
        cache = ClassCache.under(cache_root())
        if cache is None:
            return None, "", False
        options, dumping = cache.jvm_options()
    except (OSError, RuntimeError) as error:
        print(f"no class cache for Spark's JVM ({error}); it starts without one", file=sys.stderr)
        return None, "", False
    return cache, options, dumping
