"""A small client for Prometheus' HTTP API: instant queries and the list of scrape targets.

Standard library only (urllib). Everything that can go wrong between gputop and the server (a bad
URL, nothing listening, a proxy answering HTML, a PromQL error) becomes a `PrometheusError` with a
one-line message; text from the server is made printable before it is shown.
"""

from __future__ import annotations

import base64
import json
import math
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gputop.errors import GputopError
from gputop.safetext import printable

DEFAULT_TIMEOUT = 5.0
MAX_ANSWER_BYTES = 64 << 20  # a fleet of 1,000 nodes x 8 GPUs answers a few MB


class PrometheusError(GputopError):
    """The server could not be asked, or did not answer as Prometheus does."""


@dataclass(frozen=True, slots=True)
class Sample:
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class Answer:
    """An instant query's result: its samples and the time the server evaluated it at."""

    samples: tuple[Sample, ...]
    time: float | None  # None when the result was empty (the server said no time)


@dataclass(frozen=True, slots=True)
class Target:
    job: str
    instance: str
    scrape_interval: float | None  # seconds
    health: str  # "up" | "down" | "unknown"


def normalize_url(url: str) -> str:
    """`url` as http(s)://host[:port][/prefix] with no trailing slash; "host:9090" gets http://."""
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise PrometheusError(f"not a URL: {printable(url)!r} ({e})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise PrometheusError(
            f"not a Prometheus URL: {printable(url)!r}",
            hint="give the server's address, e.g. http://prometheus:9090")
    if parts.query or parts.fragment:
        raise PrometheusError(f"the Prometheus URL has a query or fragment: {printable(url)!r}",
                              hint="give only the server's address, e.g. http://prometheus:9090")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


class Prometheus:
    """Prometheus' HTTP API at `url` (or anything that speaks it: Thanos, Mimir, VictoriaMetrics).
    A user and password in the URL are sent as basic authentication and never shown."""

    def __init__(self, url: str, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        full = normalize_url(url)
        parts = urllib.parse.urlsplit(full)
        self._auth = ""
        if parts.username is not None:
            user = urllib.parse.unquote(parts.username)
            password = urllib.parse.unquote(parts.password or "")
            self._auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            host = parts.hostname or ""
            netloc = f"[{host}]" if ":" in host else host
            if parts.port is not None:
                netloc += f":{parts.port}"
            parts = parts._replace(netloc=netloc)
        self.url = urllib.parse.urlunsplit(parts)  # what messages show: no password
        self.timeout = timeout

    def query(self, promql: str, *, at: float | None = None) -> Answer:
        """An instant query, evaluated now or `at` (epoch seconds)."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self._get("/api/v1/query", params)
        kind = data.get("resultType") if isinstance(data, dict) else None
        result = data.get("result") if isinstance(data, dict) else None
        if kind == "vector" and isinstance(result, list):
            return _vector(result, promql)
        if kind == "scalar" and isinstance(result, list) and len(result) == 2:
            return Answer((Sample({}, _number(result[1])),), _number(result[0]))
        raise PrometheusError(f"{self.url} answered the query {promql!r} with an unexpected "
                              f"result ({printable(str(kind))[:40]})")

    def targets(self) -> list[Target]:
        """The active scrape targets (only Prometheus itself has this list; others answer 404)."""
        data = self._get("/api/v1/targets", {"state": "active"})
        out = []
        for t in data.get("activeTargets", []) if isinstance(data, dict) else []:
            labels = t.get("labels") or {}
            out.append(Target(job=str(labels.get("job", "")),
                              instance=str(labels.get("instance", "")),
                              scrape_interval=parse_duration(str(t.get("scrapeInterval", ""))),
                              health=str(t.get("health", "unknown"))))
        return out

    # -- HTTP -----------------------------------------------------------------------------------

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        url = f"{self.url}{path}?{urllib.parse.urlencode(params)}"
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        if self._auth:
            request.add_header("Authorization", self._auth)
        status = 200
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as e:
            # Prometheus answers errors (bad query: 400, 422, 503) with its JSON envelope.
            status, body = e.code, _read_quietly(e)
        except urllib.error.URLError as e:
            raise PrometheusError(f"cannot reach Prometheus at {self.url}: {_why(e.reason)}",
                                  hint="check the URL and that the server is running") from None
        except TimeoutError:
            raise PrometheusError(f"Prometheus at {self.url} did not answer within "
                                  f"{self.timeout:g} s") from None
        except (OSError, ValueError) as e:  # connection reset mid-answer, bad chunking...
            raise PrometheusError(f"cannot read Prometheus' answer from {self.url}: {_why(e)}"
                                  ) from None
        if len(body) > MAX_ANSWER_BYTES:
            raise PrometheusError(f"{self.url} answered more than {MAX_ANSWER_BYTES >> 20} MB")
        try:
            envelope = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            envelope = None
        if not isinstance(envelope, dict) or envelope.get("status") not in ("success", "error"):
            what = f"HTTP {status}" if status != 200 else "an answer that is not its JSON API"
            raise PrometheusError(f"{self.url} does not look like Prometheus: {path} gave {what}",
                                  hint="give the Prometheus server's base URL, e.g. "
                                       "http://prometheus:9090")
        if envelope["status"] == "error":
            kind = printable(str(envelope.get("errorType", "")))[:40]
            message = printable(str(envelope.get("error", "")))[:300]
            raise PrometheusError(f"Prometheus at {self.url} refused {path} ({kind}): {message}")
        return envelope.get("data")


def _vector(result: list[Any], promql: str) -> Answer:
    samples = []
    when = None
    try:
        for item in result:
            ts, raw = item["value"]
            labels = item.get("metric") or {}
            if not all(type(v) is str for v in labels.values()):  # JSON keys are str already
                labels = {str(k): str(v) for k, v in labels.items()}
            samples.append(Sample(labels, _number(raw)))
            when = _number(ts)
    except (AttributeError, KeyError, TypeError, ValueError):
        raise PrometheusError(f"a malformed sample in the answer to {promql!r}") from None
    return Answer(tuple(samples), when)


def _number(raw: Any) -> float:
    if isinstance(raw, bool):
        raise ValueError("a boolean is not a sample value")
    return float(raw)  # Prometheus sends "NaN", "+Inf", "-Inf" as strings; float() reads them


def _read_quietly(e: urllib.error.HTTPError) -> bytes:
    try:
        return e.read(MAX_ANSWER_BYTES + 1)
    except OSError:
        return b""
    finally:
        e.close()


def _why(reason: object) -> str:
    if isinstance(reason, TimeoutError):
        return "timed out"
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused"
    if isinstance(reason, OSError) and reason.strerror:
        return printable(reason.strerror)
    return printable(str(reason))[:200]


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400, "y": 365 * 86400}


def parse_duration(text: str) -> float | None:
    """Prometheus' durations ("15s", "1m30s", "500ms") in seconds; None if not one."""
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and total > 0 and math.isfinite(total) else None
