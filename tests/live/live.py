"""What the live suite's tests share: installing Debian's chromium and prometheus when missing
(once per machine, under a lock, bounded), a real broker with --metrics on a free port and real
producers and trainers, and a small driver of headless Chromium over the DevTools protocol (a
websocket client of the standard library: no puppeteer, no selenium). Every wait is bounded and
ends in a message. A test that cannot have its tool exits 77 (meson's skip) with the reason."""

import base64
import fcntl
import json
import os
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BROKER = os.environ.get("STOKER_BROKER_BIN", "build/server/stoker-broker")
PRODUCER = os.environ.get("STOKER_PRODUCER_BIN", "build/producer/stoker-producer")
TRAINER = os.environ.get("STOKER_TRAINER_BIN", "build/trainer/stoker-trainer")
SOURCE = os.environ.get("STOKER_SOURCE_ROOT",
                        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
INSTALL_TIMEOUT_S = 420


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(77)


def ensure(commands, package):
    """Installs Debian's package when one of commands is missing: as root, with apt-get, once at a
    time on this machine (a lock), within INSTALL_TIMEOUT_S. Skips (77) with the reason when it
    cannot be had."""
    if all(shutil.which(c) for c in commands):
        return
    if os.geteuid() != 0:
        skip("%s is not installed and installing it needs root (apt-get install %s)"
             % (commands[0], package))
    lock = open("/tmp/stoker-live-install.lock", "a")
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() - t0 > INSTALL_TIMEOUT_S:
                skip("another test held the install lock for %d s" % INSTALL_TIMEOUT_S)
            time.sleep(1)
    try:
        if all(shutil.which(c) for c in commands):
            return
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        left = max(60, INSTALL_TIMEOUT_S - (time.monotonic() - t0))
        print("installing %s with apt-get (at most %d s)" % (package, left), flush=True)
        cmd = ["apt-get", "-o", "DPkg::Lock::Timeout=120", "install", "-y", "-qq", package]
        try:
            r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
            if r.returncode != 0:  # the package lists may be missing on a fresh machine
                subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True,
                               timeout=left)
                r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired:
            skip("apt-get install %s took over %d s" % (package, left))
        if r.returncode != 0 or not all(shutil.which(c) for c in commands):
            skip("apt-get install %s failed: %s" % (package, (r.stderr or r.stdout)[-400:]))
    finally:
        lock.close()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def http_get(url, headers=None, timeout=5):
    """(status, body) of a GET; an HTTP error's status too."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def wait_for(what, cond, timeout, every=0.1):
    """Calls cond until it returns something true (returned), or fails naming what after timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except (OSError, ValueError, KeyError) as e:  # not there yet
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(every)
    raise AssertionError("%s: not within %.0f s (last: %r)" % (what, timeout, last))


class Broker:
    """A broker on an ipc:// path with --metrics on a port the system picks, its producers and
    trainers (each a Popen); close() leaves no process behind."""

    def __init__(self, *args, token=None):
        self.dir = tempfile.mkdtemp(prefix="stoker-live-")
        self.url = "ipc://" + os.path.join(self.dir, "broker.ipc")
        self.procs = []
        self.token = token
        cmd = [BROKER, "--listen", self.url, "--metrics", "http://127.0.0.1:0",
               "--log-level", "error"] + list(args)
        if token is not None:
            path = os.path.join(self.dir, "token")
            with open(path, "w") as f:
                f.write(token + "\n")
            os.chmod(path, 0o600)
            cmd += ["--token-file", path]
        self.token_path = os.path.join(self.dir, "token") if token else None
        self.broker = subprocess.Popen(cmd, stdout=subprocess.PIPE)
        self.http = None
        seen = b""
        deadline = time.monotonic() + 10
        while self.http is None:
            left = deadline - time.monotonic()
            fd = self.broker.stdout.fileno()
            chunk = os.read(fd, 4096) if left > 0 and select.select([fd], [], [], left)[0] else b""
            seen += chunk
            for line in seen.decode(errors="replace").splitlines():
                if line.startswith("metrics http://"):
                    self.http = line.split()[1]
            if self.http is None and chunk == b"":
                self.close()
                raise RuntimeError("the broker did not print its metrics URL within 10 s: %r"
                                   % seen)

    def _auth(self):
        return ["--token-file", self.token_path] if self.token_path else []

    def producer(self, name, *args):
        p = subprocess.Popen([PRODUCER, "--broker", self.url, "--name", name,
                              "--log-level", "error"] + self._auth() + list(args))
        self.procs.append(p)
        return p

    def trainer(self, *args):
        # Its summary and progress lines go to a file of the broker's folder, not the test log.
        log = open(os.path.join(self.dir, "trainer-%d.log" % len(self.procs)), "wb")
        p = subprocess.Popen([TRAINER, "--broker", self.url, "--progress", "off",
                              "--log-level", "error"] + self._auth() + list(args),
                             stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    def status(self):
        headers = {"Authorization": "Bearer " + self.token} if self.token else {}
        code, body = http_get(self.http + "/status", headers)
        assert code == 200, (code, body)
        return json.loads(body)

    def close(self):
        for p in self.procs + [self.broker]:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)  # a stopped one must die too
                except OSError:
                    pass
                p.kill()
            p.wait()
        if self.broker.stdout is not None:
            self.broker.stdout.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


# --- headless Chromium over the DevTools protocol -----------------------------------------------

class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames out (masked), text frames in
    (fragmented or not), ping answered, close noticed."""

    def __init__(self, url, timeout=10):
        assert url.startswith("ws://"), url
        hostport, _, path = url[5:].partition("/")
        host, _, port = hostport.partition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(("GET /%s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n"
                           "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n" % (path, hostport, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("websocket handshake: connection closed")
            head += chunk
        head, _, self.buf = head.partition(b"\r\n\r\n")
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise ConnectionError("websocket handshake refused: %r" % head[:200])

    def send(self, text):
        data = text.encode()
        n = len(data)
        hdr = bytes([0x81])
        if n < 126:
            hdr += bytes([0x80 | n])
        elif n < 65536:
            hdr += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            hdr += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        self.sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("websocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, timeout):
        """One whole text message, or None after timeout seconds."""
        self.sock.settimeout(timeout)
        parts = []
        try:
            while True:
                b0, b1 = self._read(2)
                n = b1 & 0x7F
                if n == 126:
                    n = struct.unpack(">H", self._read(2))[0]
                elif n == 127:
                    n = struct.unpack(">Q", self._read(8))[0]
                payload = self._read(n)
                op = b0 & 0x0F
                if op == 0x8:
                    raise ConnectionError("websocket closed by Chromium")
                if op == 0x9:  # ping: pong
                    self.sock.sendall(bytes([0x8A, 0x80 | len(payload)]) + b"\0\0\0\0" + payload)
                    continue
                if op in (0x1, 0x0):
                    parts.append(payload)
                    if b0 & 0x80:
                        return b"".join(parts).decode()
        except socket.timeout:
            return None

    def close(self):
        self.sock.close()


class Chromium:
    """Headless Chromium with one page, driven over its DevTools websocket. Every DevTools event
    is kept (self.events) so a test can look at console messages, exceptions and requests."""

    def __init__(self, width=1280, height=900):
        ensure(["chromium"], "chromium")
        self.dir = tempfile.mkdtemp(prefix="stoker-chromium-")
        args = ["chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
                "--disable-background-networking", "--disable-component-update",
                "--disable-sync", "--disable-extensions", "--remote-debugging-port=0",
                "--remote-debugging-address=127.0.0.1", "--user-data-dir=" + self.dir,
                "--window-size=%d,%d" % (width, height), "about:blank"]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self.events = []
        self.next_id = 0
        port = None
        seen = b""
        deadline = time.monotonic() + 30
        fd = self.proc.stderr.fileno()
        while port is None:
            left = deadline - time.monotonic()
            chunk = os.read(fd, 4096) if left > 0 and select.select([fd], [], [], left)[0] else b""
            if chunk == b"":
                self.close()
                raise RuntimeError("chromium printed no DevTools address within 30 s: %r"
                                   % seen[-2000:])
            seen += chunk
            for line in seen.decode(errors="replace").splitlines():
                if "DevTools listening on ws://" in line:
                    port = int(line.split("ws://", 1)[1].split("/")[0].split(":")[1])
        # Its stderr (dbus complaints) must not fill the pipe and block it: drain it to a file.
        self.log = open(os.path.join(self.dir, "stderr.log"), "wb")
        self.drain = subprocess.Popen(["cat"], stdin=self.proc.stderr, stdout=self.log)
        targets = wait_for("chromium's page target",
                           lambda: [t for t in json.loads(http_get(
                               "http://127.0.0.1:%d/json/list" % port)[1]) if t["type"] == "page"],
                           10)
        self.ws = WebSocket(targets[0]["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.call(domain + ".enable")
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=False)

    def call(self, method, timeout=15, **params):
        self.next_id += 1
        my = self.next_id
        self.ws.send(json.dumps({"id": my, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            msg = self.ws.recv(left) if left > 0 else None
            if msg is None:
                raise AssertionError("DevTools %s: no answer within %d s" % (method, timeout))
            m = json.loads(msg)
            if m.get("id") == my:
                if "error" in m:
                    raise AssertionError("DevTools %s: %s" % (method, m["error"]))
                return m.get("result", {})
            if "method" in m:
                self.events.append(m)

    def pump(self, seconds):
        """Collects events for that long."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return
            msg = self.ws.recv(left)
            if msg is not None:
                m = json.loads(msg)
                if "method" in m:
                    self.events.append(m)

    def eval(self, expr):
        r = self.call("Runtime.evaluate", expression=expr, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in r:
            raise AssertionError("page script %r threw: %s" % (expr, r["exceptionDetails"]))
        return r["result"].get("value")

    def navigate(self, url):
        self.call("Page.navigate", url=url)
        wait_for("the page to load", lambda: self.eval("document.readyState") == "complete", 15)

    def resize(self, width, height, mobile=False):
        self.call("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=1, mobile=mobile)

    def screenshot(self, path):
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def errors(self):
        """Console errors, uncaught exceptions and error log entries seen so far."""
        out = []
        for e in self.events:
            m, p = e["method"], e.get("params", {})
            if m == "Runtime.exceptionThrown":
                out.append("exception: %s" % p.get("exceptionDetails", {}).get("text"))
            elif m == "Runtime.consoleAPICalled" and p.get("type") in ("error", "assert"):
                out.append("console.%s: %s" % (p["type"], [a.get("value") for a in p["args"]]))
            elif m == "Log.entryAdded" and p["entry"]["level"] == "error":
                out.append("log: %s %s" % (p["entry"].get("text"), p["entry"].get("url", "")))
        return out

    def requests(self):
        return [e["params"]["request"]["url"] for e in self.events
                if e["method"] == "Network.requestWillBeSent"]

    def close(self):
        try:
            if getattr(self, "ws", None) is not None:
                self.ws.close()
        finally:
            if self.proc.poll() is None:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: renderers too
                except OSError:
                    pass
            self.proc.wait()
            if getattr(self, "drain", None) is not None:
                self.drain.wait()
                self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
