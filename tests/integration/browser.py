"""A real browser for integration cases: Debian's headless chromium, driven over the Chrome
DevTools protocol (a WebSocket, spoken here with the Python standard library only).

    with Browser(tmp_dir) as b:
        b.open("http://127.0.0.1:8080/job.html?id=job-000001")
        b.wait("document.body.dataset.complete === '1'", 20, "the job's stream ended")
        points = b.eval("document.getElementById('loss-chart').dataset.points")
        b.screenshot("job.png")

`--dump-dom` is not enough for the console: a page with a live event stream never finishes
loading, so chromium's virtual time never runs out; here the case waits for what it needs.
"""

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.request

from harness import TestFailure

CHROMIUM = "chromium"


class _WebSocket:
    """A client WebSocket (RFC 6455): text frames out (masked), frames in."""

    def __init__(self, url, timeout):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not m:
            raise TestFailure("not a ws:// address: %s" % url)
        self.sock = socket.create_connection((m.group(1), int(m.group(2))), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n"
                           % (m.group(3), m.group(1), m.group(2), key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise TestFailure("DevTools closed the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise TestFailure("DevTools refused the WebSocket: %r" % head[:200])
        self.buffer = head.split(b"\r\n\r\n", 1)[1]

    def send(self, text):
        payload = text.encode()
        header = bytes([0x81])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))

    def _read(self, n):
        while len(self.buffer) < n:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise TestFailure("DevTools closed the WebSocket")
            self.buffer += chunk
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def receive(self):
        """The next message's text (fragments joined; control frames skipped)."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            payload = self._read(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise TestFailure("DevTools closed the WebSocket")
            if opcode in (1, 2, 0):
                message += payload
                if b0 & 0x80:
                    return message.decode()

    def close(self):
        self.sock.close()


class Browser:
    """One headless chromium with one page, its profile in `tmp_dir`/chromium."""

    def __init__(self, tmp_dir, width=1200, height=1000, timeout=30):
        if shutil.which(CHROMIUM) is None:
            raise TestFailure("chromium is not installed (tools/setup.sh installs it)")
        self.profile = os.path.join(tmp_dir, "chromium")
        self.timeout = timeout
        # Its stderr goes to a file: a pipe nobody reads would stall it once full.
        self.log_path = os.path.join(tmp_dir, "chromium.log")
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-extensions", "--disable-background-networking", "--mute-audio",
             "--remote-debugging-port=0", "--user-data-dir=" + self.profile,
             "--window-size=%d,%d" % (width, height), "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=self.log)
        self.ws = None
        self.next_id = 0
        try:
            port = self._devtools_port()
            with urllib.request.urlopen("http://127.0.0.1:%d/json/list" % port, timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if not pages:
                raise TestFailure("chromium has no page to drive")
            self.ws = _WebSocket(pages[0]["webSocketDebuggerUrl"], timeout)
            self.call("Page.enable")
            self.call("Runtime.enable")
        except Exception:
            self.close()
            raise

    def _devtools_port(self):
        """The port chromium prints on stderr: "DevTools listening on ws://127.0.0.1:PORT/..."."""
        deadline = time.monotonic() + self.timeout
        text = ""
        while time.monotonic() < deadline and self.process.poll() is None:
            with open(self.log_path, "rb") as f:
                text = f.read().decode(errors="replace")
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", text)
            if m:
                return int(m.group(1))
            time.sleep(0.1)
        raise TestFailure("chromium did not open its DevTools port (exit %s):\n%s"
                          % (self.process.poll(), text[-2000:]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        if self.ws is not None:
            self.ws.close()
            self.ws = None
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)

    def call(self, method, **params):
        """One DevTools command; its result (events in between are dropped)."""
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.receive())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise TestFailure("DevTools %s: %s" % (method, message["error"]))
                return message.get("result", {})

    def open(self, url):
        self.call("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && location.href === %s" % json.dumps(url),
                  self.timeout, "%s loaded" % url)

    def eval(self, expression):
        """The value of a JavaScript expression in the page (a promise is awaited)."""
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                           awaitPromise=True)
        if "exceptionDetails" in result:
            raise TestFailure("%s threw: %s" % (expression, result["exceptionDetails"]))
        return result.get("result", {}).get("value")

    def wait(self, expression, timeout, what):
        """Polls `expression` until it is truthy; its value. Fails naming `what` after timeout.
        An expression that throws counts as not yet true (between two pages document.body is
        null for a moment); the timeout's message then has the last exception."""
        deadline = time.monotonic() + timeout
        thrown = None
        while True:
            try:
                value = self.eval(expression)
                thrown = None
            except TestFailure as e:
                if " threw: " not in str(e):
                    raise
                value, thrown = None, e
            if value:
                return value
            if time.monotonic() > deadline:
                error = self.eval("document.getElementById('error') && "
                                  "document.getElementById('error').textContent")
                raise TestFailure("timed out after %ss waiting for %s (%s)%s%s"
                                  % (timeout, what, expression,
                                     "; the page says: %s" % error if error else "",
                                     "; it threw: %s" % thrown if thrown else ""))
            time.sleep(0.2)

    def screenshot(self, path):
        """The page, as far down as it goes, as a PNG file."""
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(data["data"]))
