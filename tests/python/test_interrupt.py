"""Ctrl-C caught around next_batch() loses no batch (docs/python.md: "the client stays usable"):
a consumer that catches KeyboardInterrupt and goes on, under SIGINT every few milliseconds,
gets every example exactly once and ends with SupplyEnded. Before, an interrupt that came while
the library handed out a batch was raised before the Batch existed: the batch was lost, its
examples stayed in flight until close() and the supply's end never came (Stalled)."""

import json
import os
import signal
import subprocess
import sys
import time

from helpers import Cluster, require, run

require("numpy")

TOTAL = 600  # examples, in chunks of 4 and batches of 4

# The consumer: KeyboardInterrupt is raised only inside next_batch() (its handler is armed just
# around the call), as for a loop that catches Ctrl-C around next_batch(); the bookkeeping
# between calls is not what is tested.
CONSUMER = r"""
import json, os, signal, sys
import stoker

armed = False
def on_sigint(signum, frame):
    if armed:
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)

client = stoker.Client(sys.argv[1], batch_size=4, stall_timeout=5)
got, interrupts, end = [], 0, None
print("ready", flush=True)
while True:
    b = None
    try:
        armed = True
        b = client.next_batch()
        armed = False
    except KeyboardInterrupt:
        armed = False
        interrupts += 1
        continue
    except stoker.SupplyEnded as e:
        armed = False
        end = "SupplyEnded finished=%s" % e.finished
        break
    except stoker.StokerError as e:
        armed = False
        end = "%s: %s" % (type(e).__name__, e)
        break
    sessions, seqs = b.identities()
    got.extend(zip(sessions.tolist(), seqs.tolist()))
    b.release()
client.close()
signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test sends them until we exit
print(json.dumps({"got": got, "interrupts": interrupts, "end": end}), flush=True)
os._exit(0)  # no interpreter shutdown, which puts SIGINT's default action back
"""


def test_a_caught_ctrl_c_loses_no_batch():
    with Cluster() as c:
        # Slow enough that the consumer waits (in slices) for most batches, so interrupts come
        # both during waits and as batches are handed out.
        c.producer("--delay", "0.001:0.002", "--chunk", "4", "--max-examples", str(TOTAL))
        p = subprocess.Popen([sys.executable, "-c", CONSUMER, c.url], stdout=subprocess.PIPE,
                             text=True, env=os.environ)
        try:
            assert p.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 30  # bounded: the consumer's stall timeout is 5 s
            sent = 0
            while p.poll() is None and time.monotonic() < deadline:
                p.send_signal(signal.SIGINT)
                sent += 1
                time.sleep(0.002)
            out, _ = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert p.returncode == 0, (p.returncode, out[-2000:])
        r = json.loads(out.strip().splitlines()[-1])
        got = [tuple(x) for x in r["got"]]
        print("%d SIGINTs sent, %d KeyboardInterrupts caught, %d examples, end: %s"
              % (sent, r["interrupts"], len(got), r["end"]))
        assert r["interrupts"] > 0, "no interrupt reached next_batch(): the test tests nothing"
        assert len(set(got)) == len(got), "%d examples came twice" % (len(got) - len(set(got)))
        assert len(got) == TOTAL, "%d of %d examples delivered (end: %s)" % (len(got), TOTAL,
                                                                          r["end"])
        assert r["end"] == "SupplyEnded finished=True", r["end"]


if __name__ == "__main__":
    run(globals())
