"""Shared fixtures of the Python tests: a real broker and real producers on an ipc:// path in a
fresh temporary directory, and a tiny runner (test_* functions; prints "N passed, N failed";
exit 77 when a module the tests need is missing, so meson reports a skip with the reason).
Binaries and the library come from the environment set by tests/python/meson.build."""

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

BROKER = os.environ.get("STOKER_BROKER_BIN", "build/server/stoker-broker")
PRODUCER = os.environ.get("STOKER_PRODUCER_BIN", "build/producer/stoker-producer")
PULL = os.environ.get("STOKER_PULL_BIN", "build/consumer/stoker-pull")
SKIP = 77


def require(module):
    """Imports module or exits 77 with the reason."""
    try:
        return __import__(module)
    except ImportError as e:
        print("SKIP: %s is not importable by %s (%s); install python3-%s" %
              (module, sys.executable, e, module))
        sys.exit(SKIP)


class Cluster:
    """A broker with producers; close() (or the with block) leaves no process behind."""

    def __init__(self, *broker_args):
        self.dir = tempfile.mkdtemp(prefix="stoker-py-")
        self.url = "ipc://" + os.path.join(self.dir, "broker.ipc")
        self.producers = []
        self.broker = subprocess.Popen([BROKER, "--listen", self.url, "--log-level", "error"]
                                       + list(broker_args), stdout=subprocess.DEVNULL)
        import stoker
        deadline = time.monotonic() + 10
        while True:
            try:
                stoker.status(self.url, timeout=0.2)
                break
            except stoker.StokerError:
                if time.monotonic() > deadline or self.broker.poll() is not None:
                    self.close()
                    raise RuntimeError("the broker did not start")
                time.sleep(0.02)

    def producer(self, *args, name=None, **popen):
        name = name or "p%d" % (len(self.producers) + 1)
        p = subprocess.Popen([PRODUCER, "--broker", self.url, "--name", name, "--log-level",
                              "error"] + list(args), **popen)
        self.producers.append(p)
        return p

    def wait_producers(self, n, timeout=10):
        """Waits until the broker has heard n producers say hello."""
        import stoker
        deadline = time.monotonic() + timeout
        while len(stoker.status(self.url)["producers"]) < n:
            if time.monotonic() > deadline:
                raise RuntimeError("producers did not connect")
            time.sleep(0.02)

    def signal_producers(self, sig):
        for p in self.producers:
            if p.poll() is None:
                p.send_signal(sig)

    def close(self):
        for p in self.producers + [self.broker]:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def metrics_url(broker, timeout=10):
    """The http://HOST:PORT a broker started with --metrics http://127.0.0.1:0 (stdout piped)
    prints on its "metrics ..." line, or RuntimeError (with what it printed) when it printed none
    within timeout seconds or exited."""
    seen = b""
    deadline = time.monotonic() + timeout
    fd = broker.stdout.fileno()
    while True:
        left = deadline - time.monotonic()
        chunk = os.read(fd, 4096) if left > 0 and select.select([fd], [], [], left)[0] else b""
        seen += chunk
        for line in seen.decode(errors="replace").splitlines():
            if line.startswith("metrics http://"):
                return line.split()[1]
        if chunk == b"":
            raise RuntimeError("the broker did not print its metrics URL within %d s: %r"
                               % (timeout, seen))


def reap(procs, timeout):
    """Waits for every process (Popen with stdout and stderr piped) within timeout in all:
    [(returncode, stdout, stderr)]. What is left then is woken (SIGCONT) and killed, and the
    test fails: a hang."""
    deadline = time.monotonic() + timeout
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                if q.poll() is None:
                    q.send_signal(signal.SIGCONT)
                    q.kill()
                q.communicate()
            raise AssertionError("a process did not finish within %d s (a hang)" % timeout)
        outs.append((p.returncode, out, err))
    return outs


def run(namespace):
    """Runs every test_* function of namespace in order; exits 0 or 1."""
    only = os.environ.get("STOKER_TEST_ONLY", "")  # run only the tests whose name has this
    tests = [(k, v) for k, v in namespace.items()
             if k.startswith("test_") and callable(v) and only in k]
    passed = failed = 0
    for name, fn in tests:
        t0 = time.monotonic()
        try:
            fn()
        except Exception:
            failed += 1
            print("FAIL %s (%.2f s)" % (name, time.monotonic() - t0))
            traceback.print_exc(file=sys.stdout)
        else:
            passed += 1
            print("ok   %s (%.2f s)" % (name, time.monotonic() - t0))
        sys.stdout.flush()
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
