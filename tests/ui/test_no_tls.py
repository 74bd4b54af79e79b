"""The dashboard's process keeps OpenSSL out: asyncio is loaded without it."""

import subprocess
import sys

CHECK = """
import sys
from gputop.feeds.diagnosed import DiagnosedFeed  # as `gputop` loads them, in this order
from gputop.ui.app import GputopApp
import asyncio
assert "ssl" not in sys.modules and "_ssl" not in sys.modules, "ssl loaded"
assert asyncio.run(asyncio.sleep(0, "ran")) == "ran"
import ssl  # others still can
print(ssl.PROTOCOL_TLS_CLIENT is not None)
"""


def test_the_dashboard_loads_asyncio_without_openssl() -> None:
    r = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "True"


def test_where_asyncio_is_loaded_already_nothing_changes() -> None:
    code = ("import asyncio, ssl, sys\nimport gputop.ui.app\n"
            "print(asyncio.base_events.ssl is ssl)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "True"
