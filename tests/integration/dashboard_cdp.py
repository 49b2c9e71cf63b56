"""Chromium driven over the DevTools protocol on a pipe, for the dashboard test: load a page at
a given window size, read back what it laid out (Runtime.evaluate) and save a PNG of one of its
elements. The standard library only: --remote-debugging-pipe needs no WebSocket client."""

import base64
import fcntl
import json
import os
import subprocess
import time


class Cdp:
    """Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe): fd 3
    carries commands to it, fd 4 its replies and events, each message ending in a NUL."""

    def __init__(self, browser, profile, width, height):
        cmd_r, cmd_w = os.pipe()
        out_r, out_w = os.pipe()
        # high numbers, so that placing them at 3 and 4 in the child overwrites neither
        cmd_r2, out_w2 = fcntl.fcntl(cmd_r, fcntl.F_DUPFD, 10), fcntl.fcntl(out_w, fcntl.F_DUPFD, 10)
        os.close(cmd_r)
        os.close(out_w)

        def fds():
            os.dup2(cmd_r2, 3)
            os.dup2(out_w2, 4)

        self.proc = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-dev-shm-usage", "--hide-scrollbars", "--user-data-dir=" + profile,
             "--remote-debugging-pipe", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=fds, close_fds=False, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL)
        os.close(cmd_r2)
        os.close(out_w2)
        self.w, self.r = os.fdopen(cmd_w, "wb", 0), os.fdopen(out_r, "rb", 0)
        self.buf, self.n, self.session = b"", 0, None
        page = next(t for t in self.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"],
                                 flatten=True)["sessionId"]
        self.call("Page.enable")
        self.size(width, height)

    def call(self, method, **params):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params}
        if self.session:
            msg["sessionId"] = self.session
        self.w.write(json.dumps(msg).encode() + b"\0")
        while True:
            while b"\0" not in self.buf:
                chunk = self.r.read(65536)
                if not chunk:
                    raise RuntimeError("chromium closed its DevTools pipe")
                self.buf += chunk
            line, self.buf = self.buf.split(b"\0", 1)
            m = json.loads(line)
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m["result"]

    def size(self, width, height):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise RuntimeError(f"{expr}: {r['exceptionDetails']}")
        return r["result"].get("value")

    def load(self, url, polls=2, timeout=30):
        """Open url and wait until the page has polled loomd `polls` times more."""
        self.call("Page.navigate", url="about:blank")
        self.call("Page.navigate", url=url)
        end = time.time() + timeout
        while time.time() < end:
            if int(self.js("document.body ? document.body.dataset.polls || 0 : 0") or 0) >= polls:
                return
            time.sleep(0.1)
        raise RuntimeError(f"{url}: the page did not poll {polls} times")

    def shot(self, selector, path):
        """A PNG of one element (the whole of it, scrolled or not)."""
        x, y, w, h = self.js(f"(() => {{ const r = document.querySelector('{selector}')"
                             ".getBoundingClientRect(); return [r.x + scrollX, r.y + scrollY, "
                             "r.width, r.height]; })()")
        r = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True,
                      clip={"x": x, "y": y, "width": w, "height": h, "scale": 1})
        with open(path, "wb") as f:
            f.write(base64.b64decode(r["data"]))
        return os.path.getsize(path)

    def close(self):
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

