"""`python -m lockgate.runtime.driver.submit [spark-submit options] -- JOB [driver options]`:
spark-submit with Lockgate's driver as the application.

spark-submit takes a Python application only as a file path, and the
driver's file lies wherever lockgate is installed; this finds it, and puts
spark-submit's own directory on the PATH (it calls its siblings by name).
The operator's driver pods run this command.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import lockgate.runtime.driver.__main__ as driver_main  # the application spark-submit runs


def driver_file() -> str:
    return str(Path(driver_main.__file__).resolve())


def spark_submit() -> str:
    beside_python = Path(sys.executable).parent / "spark-submit"
    found = str(beside_python) if beside_python.exists() else shutil.which("spark-submit")
    if found is None:
        raise SystemExit("lockgate: spark-submit is not installed beside this Python nor on the PATH")
    return found


def submit_command(spark_options: list[str], driver_arguments: list[str]) -> list[str]:
    return [spark_submit(), *spark_options, driver_file(), *driver_arguments]


def main(argv: list[str] | None = None) -> None:
    arguments = sys.argv[1:] if argv is None else argv
    if "--" not in arguments:
        raise SystemExit(
            "usage: python -m lockgate.runtime.driver.submit [spark-submit options] -- JOB [driver options]"
        )
    split = arguments.index("--")
    command = submit_command(arguments[:split], arguments[split + 1 :])
    os.environ["PATH"] = os.pathsep.join([str(Path(command[0]).parent), os.environ.get("PATH", "")])
    os.execv(command[0], command)


if __name__ == "__main__":
    main()
