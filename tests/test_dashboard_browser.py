"""The dashboard in a real browser: `streamlit run` on a free localhost port over the seeded
database of tests/dashboard_support.py, headless Chromium (Debian's `chromium`) driven through
the DevTools protocol. Each page must render its title and key figures, draw its charts, show
no exception, and give a screenshot that is not blank.

`chromium --headless --dump-dom` alone is not enough: it returns the page before Streamlit's
websocket has delivered the app, so the test waits on the live DOM instead.
Skipped (with the reason) only where /usr/bin/chromium is absent and FARM_REQUIRE_BROWSER is
unset; FARM_SCREENSHOT_DIR keeps the screenshots.
"""

from __future__ import annotations

import base64
import io
import itertools
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest
from PIL import Image, ImageStat

from tests.dashboard_support import seed

CHROMIUM = "/usr/bin/chromium"
APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
PAGES = [  # url path, title, key figures in the page's text, charts drawn
    ("", "Overview", ["Running jobs", "1 (4.8%)", "Measurements", "Models"], 2),
    ("efficiency", "Efficiency vs oracle", ["model v1 (promoted)", "0.667", "66.7%", "33.3%"], 4),
    ("vs_vendor", "Ours vs vendor", ["Geomean speed-up", "1.04x", "50%", "2.00x",
                                     "groupnorm_bwd 0.91x"], 2),
    ("timings", "Timings explorer", ["19 matching rows.", "Download CSV"], 2),
    ("models", "Models", ["Promoted", "Download model-conv2d_fwd-sm_90-bf16-v2.bundle"], 2),
]
STATE = """JSON.stringify({
  text: document.body ? document.body.innerText : "",
  title: Array.from(document.querySelectorAll("h1")).map(h => h.innerText.trim()),
  plots: document.querySelectorAll(".js-plotly-plot .main-svg").length,
  errors: document.querySelectorAll("[data-testid=stException]").length,
  running: !!document.querySelector("[data-testid=stStatusWidget]")})"""

if not Path(CHROMIUM).exists():
    if os.environ.get("FARM_REQUIRE_BROWSER"):
        pytest.fail("FARM_REQUIRE_BROWSER is set but /usr/bin/chromium is missing "
                    "(scripts/system_deps.sh installs it)", pytrace=False)
    pytest.skip("no /usr/bin/chromium here: scripts/system_deps.sh installs Debian's chromium "
                "(set FARM_REQUIRE_BROWSER to make this a failure)", allow_module_level=True)


class DevTools:
    """A minimal DevTools protocol client: one tab of a headless Chromium."""

    def __init__(self, profile: Path) -> None:
        from websockets.sync.client import connect

        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", f"--user-data-dir={profile}", "--remote-debugging-port=0",
             "--remote-debugging-address=127.0.0.1", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in self.process.stderr:
            if found := re.search(r"DevTools listening on (ws://\S+)", line):
                break
        else:
            raise RuntimeError("chromium exited before opening its DevTools port")
        self.stack = ExitStack()
        self.socket = self.stack.enter_context(connect(found.group(1), max_size=None,
                                                       open_timeout=20))
        self.ids = itertools.count(1)
        self.session = None
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", width=1400, height=1600,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method: str, **params) -> dict:
        ident = next(self.ids)
        message = {"id": ident, "method": method, "params": params}
        if self.session:
            message["sessionId"] = self.session
        self.socket.send(json.dumps(message))
        while True:
            reply = json.loads(self.socket.recv(timeout=30))
            if reply.get("id") == ident:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def state(self) -> dict:
        result = self.call("Runtime.evaluate", expression=STATE, returnByValue=True)
        return json.loads(result["result"]["value"])

    def close(self) -> None:
        self.stack.close()
        self.process.terminate()
        self.process.wait(timeout=20)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{folder / 'farm.db'}"
    seed(url)
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(APP), "--server.address", "127.0.0.1",
         "--server.port", str(port), "--server.headless", "true",
         "--browser.gatherUsageStats", "false"],
        env={**os.environ, "FARM_DB_URL": url}, stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/_stcore/health", timeout=2) as reply:
                if reply.status == 200:
                    break
        except OSError:
            pass
        assert server.poll() is None, "streamlit exited"
        assert time.monotonic() < deadline, "streamlit did not answer in 60 s"
        time.sleep(0.2)
    browser = DevTools(folder / "profile")
    yield base, browser
    browser.close()
    server.terminate()
    server.wait(timeout=20)


@pytest.mark.parametrize("path,title,figures,charts", PAGES, ids=[p[1] for p in PAGES])
def test_page_in_a_browser(served, path, title, figures, charts):
    base, browser = served
    browser.call("Page.navigate", url=f"{base}/{path}")
    deadline, last = time.monotonic() + 45, None
    while True:  # rendered: title, figures and charts there, nothing running, text stable
        state = browser.state()
        done = (title in state["title"] and all(f in state["text"] for f in figures)
                and state["plots"] >= charts and not state["running"])
        if done and state == last:
            break
        assert time.monotonic() < deadline, f"{title}: not rendered in 45 s: {state}"
        last = state
        time.sleep(0.3)
    assert state["errors"] == 0, state["text"]
    png = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    image = Image.open(io.BytesIO(png)).convert("RGB")
    assert image.size == (1400, 1600)
    gray = ImageStat.Stat(image.convert("L"))
    assert gray.stddev[0] > 8, "the screenshot is nearly uniform"
    assert len(image.getcolors(maxcolors=1 << 20) or []) > 200, "too few colours: blank page?"
    if os.environ.get("FARM_SCREENSHOT_DIR"):
        folder = Path(os.environ["FARM_SCREENSHOT_DIR"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{path or 'overview'}.png").write_bytes(png)
