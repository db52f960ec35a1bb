"""A real Prometheus (Debian's `prometheus`) on loopback, scraping given targets."""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.operator.operator_process import free_port


@dataclass
class Prometheus:
    process: subprocess.Popen[bytes]
    port: int
    log: Path

    @classmethod
    def start(cls, targets: list[str], workdir: Path, scrape_interval: str = "1s") -> Prometheus:
        config = {
            "global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval},
            "scrape_configs": [{"job_name": "lockgate", "static_configs": [{"targets": targets}]}],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        log = workdir / "prometheus.log"
        process = subprocess.Popen(
            [
                "prometheus",
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--log.level=warn",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("w"),
        )
        return cls(process, port, log)

    def _get(self, path: str, **params: str) -> Any:
        url = f"http://127.0.0.1:{self.port}{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as error:
            if error.code not in (400, 422):
                raise  # e.g. 503 while Prometheus starts
            return json.loads(error.read())  # a bad query: Prometheus says why in the body

    def query(self, expr: str) -> dict[str, Any]:
        """The API's answer: `status` ("success" or "error"), `data.result`, or `error`."""
        return dict(self._get("/api/v1/query", query=expr))

    def targets_up(self) -> dict[str, str]:
        """Scrape URL -> health ("up", "down", "unknown"); empty before Prometheus listens."""
        try:
            answer = self._get("/api/v1/targets")
        except OSError:
            return {}
        return {t["scrapeUrl"]: t["health"] for t in answer["data"]["activeTargets"]}

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
