"""A local Prometheus (Debian's `prometheus` binary) scraping tritonservers on loopback, for tests and dev."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from hotpath.errors import HotpathError
from hotpath.monitoring.promql import JOB
from hotpath.shutdown import stop_process


class LocalPrometheus:
    """Scrape `targets` (host:port of Triton metrics) as job 'hotpath' every `interval`, with `rule_files`."""

    def __init__(self, targets: list[str], rule_files: list[Path], port: int, interval: str = "1s"):
        self.targets, self.rule_files, self.port, self.interval = targets, rule_files, port, interval
        self.process: subprocess.Popen | None = None
        self.dir: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 30.0) -> "LocalPrometheus":
        exe = shutil.which("prometheus")
        if not exe:
            raise HotpathError("no `prometheus` binary: scripts/setup.sh installs Debian's prometheus package")
        self.dir = Path(tempfile.mkdtemp(prefix="hotpath-prometheus-"))
        rules = []
        for i, path in enumerate(self.rule_files):
            # Copies, so the rule file paths in the config stay inside the scratch directory.
            rules.append(str(shutil.copy(path, self.dir / f"rules-{i}.yml")))
        config = {"global": {"scrape_interval": self.interval, "evaluation_interval": self.interval},
                  "rule_files": rules,
                  "scrape_configs": [{"job_name": JOB, "static_configs": [{"targets": self.targets}]}]}
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        cmd = [exe, f"--config.file={self.dir / 'prometheus.yml'}", f"--storage.tsdb.path={self.dir / 'data'}",
               f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"]
        self.log = open(self.dir / "prometheus.log", "wb")
        self.process = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.process.poll() is not None:
                raise HotpathError(f"prometheus exited: {(self.dir / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        self.stop()
        raise HotpathError(f"prometheus not ready after {timeout:.0f}s")

    def api(self, path: str, **params) -> dict:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as r:
            body = json.loads(r.read())
        if body.get("status") != "success":
            raise HotpathError(f"prometheus {path}: {body}")
        return body["data"]

    def query(self, expr: str) -> list[dict]:
        """Instant query; returns the result vector (each item: metric labels and [time, value])."""
        data = self.api("query", query=expr)
        return data["result"] if data["resultType"] == "vector" else [{"metric": {}, "value": data["result"]}]

    def stop(self) -> None:
        stop_process(self.process, timeout=15, group=False)
        if self.dir:
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalPrometheus":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
