"""A real Prometheus scraping real `gputop serve` processes on loopback, for tests that must see
what Prometheus itself makes of the exporter (tests skip where `prometheus` is not installed;
Debian and Ubuntu: `apt-get install prometheus`)."""

from __future__ import annotations

import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

PROMETHEUS = shutil.which("prometheus")


def free_port() -> int:
    """A loopback port nothing listens on (now)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def serve(*args: str) -> tuple[subprocess.Popen[str], int]:
    """`gputop serve ... --metrics 127.0.0.1:0`, and the port it says it bound."""
    proc = subprocess.Popen([sys.executable, "-m", "gputop", "serve", *args,
                             "--metrics", "127.0.0.1:0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.2)
        if ready:
            line = proc.stderr.readline()
            if "serving metrics on http://127.0.0.1:" in line:
                return proc, int(line.split("127.0.0.1:")[1].split("/")[0])
            if not line:
                break
    proc.kill()
    raise AssertionError(f"gputop serve did not start: {proc.stderr.read()}")


def stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextmanager
def prometheus(tmp: Path, targets: Sequence[int], *, scrape_s: float = 1.0) -> Iterator[str]:
    """A Prometheus scraping `127.0.0.1:PORT` for each of `targets` every `scrape_s` (job
    `gputop`), storing under `tmp`; yields its URL."""
    assert PROMETHEUS is not None
    listed = ", ".join(f"'127.0.0.1:{p}'" for p in targets)
    (tmp / "prometheus.yml").write_text(
        f"global:\n  scrape_interval: {scrape_s:g}s\n  scrape_timeout: {scrape_s:g}s\n"
        "scrape_configs:\n  - job_name: gputop\n    static_configs:\n"
        f"      - targets: [{listed}]\n")
    port = free_port()
    proc = subprocess.Popen(
        [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
         "--log.level=error"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp,
        text=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(proc)
