"""`gputop --web`: the dashboard in a real browser. Debian's Chromium, driven by Playwright, opens
the page that `gputop --demo --web` serves on loopback; what the page's terminal receives over
its WebSocket is replayed into a terminal emulator (pyte) and read back: the 8 GPUs of the demo
are on it, and a key pressed in the page (`?`) opens the help."""

from __future__ import annotations

import base64
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gputop.commands import monitor
from gputop.commands.args import web_address

pytest.importorskip("textual_serve")
sync_api = pytest.importorskip("playwright.sync_api")
pyte = pytest.importorskip("pyte")

CHROMIUM = os.environ.get("GPUTOP_TEST_CHROMIUM") or shutil.which("chromium") or ""
needs_chromium = pytest.mark.skipif(not CHROMIUM, reason="no Chromium (apt-get install chromium)")
# Flags for a machine with no network and no display (Chromium otherwise tries to reach Google).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run",
                 "--disable-dev-shm-usage"]
SCREENSHOT = Path(__file__).parents[2] / "screenshots" / "web-demo.png"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def served_demo() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "gputop", "--demo", "--web",
                             f"127.0.0.1:{port}"], stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # the one line it says when it listens
        assert f"at http://127.0.0.1:{port}/" in line, line
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(proc.pid, 15)  # the server and the dashboard it started for the page
        proc.wait(timeout=30)


class Terminal:
    """The page's terminal, rebuilt from the bytes its WebSocket received."""

    def __init__(self) -> None:
        self.screen = pyte.Screen(160, 48)
        self.stream = pyte.ByteStream(self.screen)

    def feed(self, event: dict[str, object]) -> None:
        response = event["response"]
        assert isinstance(response, dict)
        data = response["payloadData"]
        raw = base64.b64decode(data) if response["opcode"] == 2 else str(data).encode()
        if not raw.startswith(b'["'):  # textual-serve's own messages are JSON
            self.stream.feed(raw)

    def text(self) -> str:
        return "\n".join(self.screen.display)


def wait_for(page: object, terminal: Terminal, pattern: str, timeout: float = 90) -> str:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        text = terminal.text()
        if re.search(pattern, text):
            return text
        page.wait_for_timeout(200)  # type: ignore[attr-defined]  # lets the events arrive
    raise AssertionError(f"{pattern!r} never showed; the page's terminal:\n{terminal.text()}")


@needs_chromium
def test_the_demo_in_chromium_shows_eight_gpus_and_takes_keys(served_demo: str) -> None:
    terminal = Terminal()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            # 160x48 cells: the size the page asks of the app follows the window
            page = browser.new_page(viewport={"width": 1460, "height": 920})
            cdp = page.context.new_cdp_session(page)
            cdp.send("Network.enable")
            cdp.on("Network.webSocketCreated", lambda e: resize(terminal, str(e["url"])))
            cdp.on("Network.webSocketFrameReceived", terminal.feed)
            page.goto(served_demo)
            text = wait_for(page, terminal, r"(?s)0\s+H100.*7\s+H100")
            for gpu in range(8):
                assert re.search(rf"\b{gpu}\s+H100 80GB HBM3", text), text
            assert "gputop" in text and "demo recording" in text
            if os.environ.get("GPUTOP_SCREENSHOTS"):  # the README's picture, once training runs
                wait_for(page, terminal, r"PWR CAP")
                page.wait_for_timeout(3000)
                page.screenshot(path=str(SCREENSHOT))
            page.mouse.click(10, 900)  # the terminal takes the keyboard once clicked
            page.keyboard.press("?")
            text = wait_for(page, terminal, r"gputop help")
            assert "quit gputop" in text
        finally:
            browser.close()


def resize(terminal: Terminal, url: str) -> None:
    """The page opens its WebSocket with its terminal's size (`/ws?width=W&height=H`)."""
    size = dict(re.findall(r"(width|height)=(\d+)", url))
    if size:
        terminal.screen.resize(int(size["height"]), int(size["width"]))


def test_web_is_on_loopback_unless_told() -> None:
    parser = monitor.build_parser()
    assert parser.parse_args(["--web"]).web == ""
    assert web_address(parser, "") == ("127.0.0.1", 8000)
    assert web_address(parser, "9000") == ("127.0.0.1", 9000)
    assert web_address(parser, ":9000") == ("0.0.0.0", 9000)
    with pytest.raises(SystemExit):
        web_address(parser, "host:port")
