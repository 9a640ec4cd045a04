"""A Python consumer's liveness and bounded waits, with a real broker
and producers: a step longer than --trainer-timeout keeps the consumer and its leases (the C
library's heartbeat thread beats while Python computes); a broker SIGKILLed and never restarted
ends the README's StokerIterableDataset loop with Stalled at its stall timeout; Ctrl-C ends a
pending pull within a fraction of a second."""

import os
import signal
import subprocess
import sys
import time

from helpers import Cluster, require, run

require("numpy")
import stoker  # noqa: E402

SCHEMA = "input:float32[10],output:float32[1]"


def test_a_step_longer_than_the_trainer_timeout_keeps_the_consumer_and_its_leases():
    with Cluster("--trainer-timeout", "1") as c:
        c.producer("--delay", "0:0")
        with stoker.Client(c.url, stall_timeout=5) as client:
            first = client.next_batch(8)
            time.sleep(3.0)  # an evaluation pass: three trainer timeouts without a pull
            first.release()
            client.next_batch(8).release()
            client._lib.stoker_consumer_flush(client._handle)
            counters = client.status()["counters"]
            assert counters["redelivered"] == 0, counters


DEAD_BROKER = r"""
import sys, time
import stoker
from stoker.torch import StokerIterableDataset
ds = StokerIterableDataset(sys.argv[1], batch_size=8, stall_timeout=2.0)
n = 0
try:
    for batch in ds:
        n += 1
        if n == 20:
            print("kill", flush=True)
            sys.stdin.readline()  # the broker is dead
            killed = time.monotonic()
except stoker.Stalled as e:
    print("stalled %.2f" % (time.monotonic() - killed), flush=True)
    sys.exit(0)
print("ended without Stalled", flush=True)
sys.exit(1)
"""


def test_a_broker_that_stays_down_ends_the_torch_loop_with_stalled_in_time():
    require("torch")
    with Cluster() as c:
        c.producer("--delay", "0:0.01")
        p = subprocess.Popen([sys.executable, "-c", DEAD_BROKER, c.url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, env=os.environ)
        try:
            assert p.stdout.readline().strip() == "kill"
            c.broker.kill()
            c.broker.wait()
            p.stdin.write("\n")
            p.stdin.flush()
            # Bounded: the loop must end within 20 s (its stall timeout is 2 s).
            out, _ = p.communicate(timeout=20)
            assert p.returncode == 0 and out.startswith("stalled"), (p.returncode, out)
            took = float(out.split()[1])
            assert took < 5.0, "Stalled came %.1f s after the broker died (stall 2 s)" % took
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


WAITER = r"""
import sys, time
import stoker
client = stoker.Client(sys.argv[1], stall_timeout=60)
client._open(8)
print("pulling", flush=True)
try:
    client.next_batch()
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
print("no interrupt", flush=True)
sys.exit(1)
"""


def test_ctrl_c_ends_a_pending_pull_within_half_a_second():
    with Cluster("--schema", SCHEMA) as c:  # no producer: the pull waits for its stall timeout
        p = subprocess.Popen([sys.executable, "-c", WAITER, c.url], stdout=subprocess.PIPE,
                             text=True, env=os.environ)
        try:
            assert p.stdout.readline().strip() == "pulling"
            time.sleep(1.0)  # into the wait, pulls parked at the broker
            sent = time.monotonic()
            p.send_signal(signal.SIGINT)
            line = p.stdout.readline().strip()  # bounded: the waiter's stall timeout is 60 s
            took = time.monotonic() - sent
            p.wait(timeout=30)
            assert line == "interrupted" and p.returncode == 130, (line, p.returncode)
            assert took < 0.5, "Ctrl-C took %.2f s to end the pull" % took
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    run(globals())
