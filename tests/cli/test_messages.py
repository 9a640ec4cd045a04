"""What the binaries and `python3 -m stoker.status` say when pointed at the wrong place, checked
against real processes: a client at the broker's metrics (HTTP) port is told it reached an HTTP
server, not that the port speaks TLS; an address that refuses connections or a host name that
does not resolve is said within a second (a WARN line; the client still waits as long as it
would); stoker.status reads an http:// metrics address and explains an address that is no URL;
stoker-pull says "1 example", not "1 examples"."""

import os
import re
import select
import socket
import subprocess
import sys
import tempfile
import time
import traceback

BROKER = os.environ["STOKER_BROKER_BIN"]
PRODUCER = os.environ["STOKER_PRODUCER_BIN"]
PULL = os.environ["STOKER_PULL_BIN"]
PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    def __init__(self, *args):
        self.port, self.metrics = free_port(), free_port()
        self.url = "tcp://127.0.0.1:%d" % self.port
        self.p = subprocess.Popen([BROKER, "--listen", self.url, "--metrics",
                                   "http://127.0.0.1:%d" % self.metrics, "--log-level", "error"]
                                  + list(args), stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.metrics), timeout=1).close()
                return
            except OSError:
                assert self.p.poll() is None and time.monotonic() < deadline, "no broker"
                time.sleep(0.05)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.p.terminate()
        self.p.wait(10)


def first_line_with(cmd, pattern, within_s):
    """Starts cmd; (seconds until its stderr matched pattern, or None, and that stderr)."""
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t0 = time.monotonic()
    found = None
    buf = b""
    fd = p.stderr.fileno()
    while found is None and time.monotonic() - t0 < within_s + 2:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            if re.search(pattern, buf.decode(errors="replace")):
                found = time.monotonic() - t0
    p.kill()
    p.wait()
    p.stderr.close()
    return found, buf.decode(errors="replace")


def test_client_at_the_metrics_port_is_told_it_is_http():
    with Broker() as b:
        out = subprocess.run([PULL, "--broker", "tcp://127.0.0.1:%d" % b.metrics, "--max-examples",
                              "1", "--stall-timeout", "5"], capture_output=True, text=True,
                             timeout=30)
    assert out.returncode != 0, out
    assert "is an HTTP server, not a stoker broker" in out.stderr, out.stderr
    assert "speaks TLS" not in out.stderr, out.stderr
    assert "http://127.0.0.1:%d/" % b.metrics in out.stderr, out.stderr


def test_refused_address_is_said_within_a_second():
    port = free_port()  # nothing listens there
    took, err = first_line_with([PULL, "--broker", "tcp://127.0.0.1:%d" % port, "--max-examples",
                                 "1", "--stall-timeout", "5"], r"refuses connections", 1.0)
    assert took is not None and took < 1.0, (took, err)


def test_unknown_host_is_said_within_a_second():
    took, err = first_line_with([PULL, "--broker", "tcp://no-such-host.invalid:7070",
                                 "--max-examples", "1", "--stall-timeout", "5"],
                                r"unknown host 'no-such-host\.invalid'", 1.0)
    assert took is not None and took < 1.0, (took, err)


def test_status_reads_an_http_metrics_address():
    with Broker() as b:
        for url in ("http://127.0.0.1:%d" % b.metrics, "http://127.0.0.1:%d/status" % b.metrics):
            out = subprocess.run([PYTHON, "-m", "stoker.status", url], capture_output=True,
                                 text=True, timeout=30)
            assert out.returncode == 0, out
            assert re.search(r"^discrepancy +0$", out.stdout, re.M), out.stdout
        # The broker's --listen port given as http://: said to be no metrics address.
        out = subprocess.run([PYTHON, "-m", "stoker.status", "http://127.0.0.1:%d" % b.port],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 1 and "not a stoker broker's metrics address" in out.stderr, out


def test_status_explains_an_address_that_is_no_url():
    out = subprocess.run([PYTHON, "-m", "stoker.status", "localhost:7070"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 2, out
    assert "did you mean 'tcp://localhost:7070'?" in out.stderr, out.stderr


def test_pull_says_one_example():
    with tempfile.TemporaryDirectory() as tmp:
        url = "ipc://" + os.path.join(tmp, "b.ipc")
        broker = subprocess.Popen([BROKER, "--listen", url, "--log-level", "error"],
                                  stdout=subprocess.DEVNULL)
        try:
            prod = subprocess.run([PRODUCER, "--broker", url, "--max-examples", "1", "--delay",
                                   "0:0", "--log-level", "error"], capture_output=True,
                                  timeout=30)
            assert prod.returncode == 0, prod
            out = subprocess.run([PULL, "--broker", url, "--batch", "1"], capture_output=True,
                                 text=True, timeout=30)
        finally:
            broker.terminate()
            broker.wait(10)
    assert "(after 1 example)" in out.stderr, out.stderr
    assert "1 example written" in out.stderr and "1 batch through" in out.stderr, out.stderr
    assert "1 examples" not in out.stderr, out.stderr


if __name__ == "__main__":
    passed = failed = 0
    for name, fn in [(k, v) for k, v in list(globals().items()) if k.startswith("test_")]:
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print("ok   %s (%.2f s)" % (name, time.monotonic() - t0))
        except Exception:
            failed += 1
            print("FAIL %s (%.2f s)" % (name, time.monotonic() - t0))
            traceback.print_exc(file=sys.stdout)
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
