"""The peers' own virtualenvs under .cache/peers, made on first use: a peer is never
a Lockgate dependency and never shares Lockgate's environment."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PEERS = Path(__file__).resolve().parent.parent.parent / ".cache" / "peers"

# What each peer installs, and a module whose import shows the install is whole.
PACKAGES = {
    "flink": (["apache-flink"], "pyflink.table"),
    # transformWithState's row API needs pyarrow and protobuf beside pyspark.
    "spark": (
        ["pyspark==4.3.0", "pandas", "pyarrow", "protobuf"],
        "pyspark.sql.streaming.stateful_processor",
    ),
}


def peer_python(peer: str) -> Path:
    """The Python of `peer`'s virtualenv, made and installed on first use."""
    packages, probe = PACKAGES[peer]
    home = PEERS / peer
    python = home / "bin" / "python"
    if not _imports(python, probe):
        subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


def _imports(python: Path, module: str) -> bool:
    if not python.exists():
        return False
    done = subprocess.run([str(python), "-c", f"import {module}"], capture_output=True, check=False)
    return done.returncode == 0
