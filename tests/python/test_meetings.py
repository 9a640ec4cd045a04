"""The combination suite's second part: where the promises of the last round meet the other
features (test_combinations.py holds consumers x supplies x faults). Each cell is one run of real
processes, checked for exact delivery from the identities each consumer wrote:
- a caught Ctrl-C (SIGINT every few milliseconds, KeyboardInterrupt caught around the pull and
  the loop going on) x a plain consumer, a group's ranks, a dataset's epochs(), a committing
  consumer;
- packed rows (pack=) x a group's ranks x strict or overlapping epochs' ends;
- a dataset x a broker SIGKILLed and started again x epochs(): the Epoch it cut stops with
  BrokerRestarted, epochs() again follows the new broker's epochs, each whole;
- the only producer paused (SIGSTOP) just under --producer-timeout, and past it but within
  --silent-grace x a plain consumer, a group, a dataset.
Invariants: every example (stream: its (session, seq); dataset: its (epoch, index) per broker)
trained at most once, and every one not trained still queued (a group's leftover, in the last
epoch only); the same number of steps on every rank; the end reaching every consumer
(SupplyEnded, no other error); nothing in flight at the end; every process done within its
bound. Names on the command line (e.g. "pause-over/group2/dataset") run single cells."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import helpers

helpers.require("numpy")
import stoker  # noqa: E402

# One consumer process. Over a dataset `for epoch in client.epochs(n)` (BrokerRestarted: epochs()
# again, one run per broker), over a stream next_batch() until SupplyEnded. With "interrupts" a
# SIGINT handler raises KeyboardInterrupt only while a pull is under way (as a loop that catches
# Ctrl-C around it), and the loop goes on: a stream's with next_batch() again, an Epoch's with a
# new iterator over the same Epoch. Records each batch's identities per run and loop.
CONSUMER = r"""
import json, os, signal, sys, time
import stoker
cfg = json.loads(sys.argv[1])
rec = {"runs": [], "end": None, "leftover": None, "error": None, "interrupts": 0, "restarts": 0}
armed = False
def on_sigint(signum, frame):
    if armed:
        raise KeyboardInterrupt
signal.signal(signal.SIGINT, on_sigint)
open(cfg["out"] + ".ready", "w").close()  # interrupts may come from now on
kw = {"stall_timeout": cfg["stall"]}
if not cfg["lazy"]:
    kw.update(batch_size=cfg["batch"])  # connects here, before any interrupt is armed
if cfg["world"]:
    kw.update(group="g", rank=cfg["rank"], world_size=cfg["world"])
if cfg["pack"]:
    kw.update(pack=cfg["pack"])
if cfg["commit"]:
    kw.update(commit=True)
steps = 0
def record(loop, b):
    global steps
    if cfg["pack"]:
        b["tokens"].pack(row=cfg["pack"], rows=cfg["batch"])  # raises when it overflows
    a, z = b.epoch_indices() if cfg["epochs"] else b.identities()
    loop["sizes"].append(len(a))
    loop["items"] += [[int(x), int(y)] for x, y in zip(a, z)]
    steps += 1
    if steps == 1:
        open(cfg["out"] + ".pulled", "w").close()  # a restart may come from now on
    if cfg["commit"] and steps % 4 == 0:
        c.state_dict()
def pull(step):
    # step() with the interrupt armed; a caught interrupt goes on (None: try again).
    global armed
    try:
        armed = True
        got = step()
        armed = False
        return got
    except KeyboardInterrupt:
        armed = False
        rec["interrupts"] += 1
        return None
c = stoker.Client(cfg["url"], **kw)
# Every consumer starts pulling together (a slow start would find the run over, or the broker
# already restarted): connected, then waiting for the test's word.
open(cfg["out"] + ".connected", "w").close()
deadline = time.monotonic() + 60
while not os.path.exists(cfg["go"]) and time.monotonic() < deadline:
    time.sleep(0.01)
try:
    if cfg["epochs"]:
        while True:
            run = []
            rec["runs"].append(run)
            try:
                for ep in c.epochs(cfg["epochs"], cfg["batch"]):
                    loop = {"sizes": [], "items": []}
                    run.append(loop)
                    it = [iter(ep)]
                    def step():
                        try:
                            return next(it[0])
                        except StopIteration:
                            return False
                    while True:
                        b = pull(step)
                        if b is None:
                            it[0] = iter(ep)  # the interrupted one is closed
                            continue
                        if b is False:
                            break
                        record(loop, b)
                break
            except stoker.BrokerRestarted:
                rec["restarts"] += 1
                if rec["restarts"] > 2:
                    raise
        while pull(lambda: c.next_batch(cfg["batch"])) is None:
            pass
        rec["error"] = "a batch after the last epoch"
    else:
        loop = {"sizes": [], "items": []}
        rec["runs"].append([loop])
        while True:
            b = pull(lambda: c.next_batch(cfg["batch"]))
            if b is not None:
                record(loop, b)
                b.release()
except stoker.SupplyEnded as e:
    rec["end"] = e.reason
    rec["leftover"] = e.leftover
except Exception as e:
    rec["error"] = "%s: %s" % (type(e).__name__, e)
finally:
    armed = False
    if cfg["commit"] and rec["error"] is None:
        c.state_dict()
    c.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the test may send more until we exit
with open(cfg["out"], "w") as f:
    json.dump(rec, f)
os._exit(0)  # no interpreter shutdown, which puts SIGINT's default action back
"""

BATCH = 8
EPOCHS = 2
PRODUCER_TIMEOUT_S = 1.0
SILENT_GRACE_S = 8.0
REAP_S = float(os.environ.get("STOKER_MEETINGS_REAP_S", "60"))  # a cell's processes, in all
INTERRUPT_EVERY_S = float(os.environ.get("STOKER_MEETINGS_INTERRUPT_S", "0.005"))
INTERRUPT_FOR_S = float(os.environ.get("STOKER_MEETINGS_INTERRUPT_FOR_S", "3"))
STREAM_EXAMPLES = 400  # per producer
ITEMS = 16 * 8 * 2 + 3  # a dataset's items: no step divides it
TOKEN_ITEMS = 240
ROW, ROWS = 256, 4  # pack=256, 4 rows a batch

# name: (consumers: (world, processes, commit), supply, fault). Supplies: "stream", "dataset"
# (strict epochs), "dataset-overlap", "tokens" and "tokens-overlap" (token sequences, packed).
CONS = {"plain1": (0, 1, False), "plain2": (0, 2, False), "group2": (2, 2, False),
        "group3": (3, 3, False), "commit1": (0, 1, True)}
CELLS = [
    "interrupt/plain1/stream", "interrupt/group2/stream", "interrupt/commit1/stream",
    "interrupt/group2/dataset", "interrupt-connect/group2/stream",
    "pack/group3/tokens", "pack/group2/tokens-overlap",
    "restart/plain1/dataset", "restart/plain2/dataset-overlap",
    "pause-under/plain1/stream", "pause-over/plain1/stream", "pause-over/group2/stream",
    "pause-over/plain1/dataset", "pause-over/group2/dataset",
]
# A cell run by name only: an interrupt that lands after a yielded batch reached this test's own
# step() and before it records it loses that batch in the test's books (the batch was the
# caller's; the library acknowledges it with the next pull) — with
# STOKER_MEETINGS_INTERRUPT_S=0.003 a few items of an epoch go unrecorded. An interrupt inside
# the library's Epoch iteration before the yield, or during the first pull's connect, loses
# nothing: the cells interrupt/group2/dataset and interrupt-connect/group2/stream hold it.
OPEN_CELLS = ["interrupt/plain1/dataset"]


def run_cell(name):
    fault, consumers, supply = name.split("/")
    world, n_proc, commit = CONS[consumers]
    dataset = supply != "stream"
    tokens = supply.startswith("tokens")
    size = TOKEN_ITEMS if tokens else ITEMS
    # No consumer is paused or killed here: a trainer timeout a loaded machine never reaches.
    # (At 3 s, one run of restart/plain2/dataset-overlap under a load of 18 on 2 cores had three
    # items of the new broker's epoch 1 trained by both consumers, after 12.9 s; a consumer
    # dropped as silent and its leases handed on is the likely cause, not a confirmed one.)
    broker_args = ["--trainer-timeout", "10", "--producer-timeout", str(PRODUCER_TIMEOUT_S),
                   "--silent-grace", str(SILENT_GRACE_S)]
    if dataset:
        broker_args += ["--dataset-size", str(size), "--epochs", str(EPOCHS)]
        if supply.endswith("overlap"):
            broker_args.append("--overlap-epochs")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    with helpers.Cluster(*broker_args) as c:
        # One producer where it is paused (the sharp case: nothing else supplies), else two.
        n_producers = 1 if fault.startswith("pause") else 2
        for k in range(n_producers):
            if tokens:
                c.producer("--workload", "tokens", "--lengths", "lognormal:64:256", "--items",
                           str(size), "--delay", "0:0.0005", name="t%d" % k, **quiet)
            elif dataset:
                # Slower where the broker restarts: it must come mid-run, on a loaded machine too
                # (about 1.5 s from a third of the first epoch to the end).
                delay = "0.004:0.008" if fault == "restart" else "0.001:0.003"
                c.producer("--items", str(size), "--delay", delay, "--chunk", "4", **quiet)
            else:
                c.producer("--max-examples", str(STREAM_EXAMPLES), "--delay", "0.001:0.003",
                           "--chunk", "4", **quiet)
        c.wait_producers(n_producers)
        outs = [os.path.join(c.dir, "c%d.json" % r) for r in range(n_proc)]
        procs = []
        for r in range(n_proc):
            cfg = {"url": c.url, "world": world, "rank": r, "batch": ROWS if tokens else BATCH,
                   "epochs": EPOCHS if dataset else 0, "pack": ROW if tokens else 0,
                   "commit": commit, "out": outs[r], "stall": 15.0,
                   "lazy": fault == "interrupt-connect", "go": os.path.join(c.dir, "go")}
            procs.append(subprocess.Popen([sys.executable, "-c", CONSUMER, json.dumps(cfg)],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                          text=True))
        deadline = time.monotonic() + 60
        while not all(os.path.exists(o + ".connected") for o in outs):
            assert time.monotonic() < deadline, "the consumers did not connect"
            assert all(p.poll() is None for p in procs), "a consumer exited before it started"
            time.sleep(0.02)
        open(os.path.join(c.dir, "go"), "w").close()
        stop = threading.Event()
        if fault.startswith("interrupt"):
            def interrupt():
                until = time.monotonic() + INTERRUPT_FOR_S
                while not stop.is_set() and time.monotonic() < until:
                    for p, out in zip(procs, outs):
                        if p.poll() is None and os.path.exists(out + ".ready"):
                            p.send_signal(signal.SIGINT)
                    time.sleep(INTERRUPT_EVERY_S)
            threading.Thread(target=interrupt, daemon=True).start()
        elif fault == "restart":
            # Every consumer under way (each pulled from the broker that dies) and a third of the
            # first epoch trained, then the broker is SIGKILLed and started again.
            deadline = time.monotonic() + 30
            while acknowledged(c.url) < size // 3 or \
                    not all(os.path.exists(o + ".pulled") for o in outs):
                assert time.monotonic() < deadline, "no progress before the restart"
                time.sleep(0.02)
            c.broker.kill()
            c.broker.wait()
            c.broker = subprocess.Popen([helpers.BROKER, "--listen", c.url, "--log-level",
                                         "error"] + broker_args, stdout=subprocess.DEVNULL)
        elif fault.startswith("pause"):
            time.sleep(0.3)
            pause = PRODUCER_TIMEOUT_S * 0.6 if fault == "pause-under" else \
                PRODUCER_TIMEOUT_S + 1.5  # past the timeout, well within the silent grace
            c.producers[0].send_signal(signal.SIGSTOP)
            time.sleep(pause)
            c.producers[0].send_signal(signal.SIGCONT)
        try:
            results = helpers.reap(procs, REAP_S)
        finally:
            stop.set()
        for r, (rc, _, err) in enumerate(results):
            assert rc == 0, "consumer %d failed:\n%s" % (r, err[-3000:])
        records = [json.load(open(o)) for o in outs]
        st = stoker.status(c.url)
        if fault.startswith("interrupt"):
            assert all(rec["interrupts"] > 0 for rec in records), \
                [rec["interrupts"] for rec in records]
        check(records, st, world, dataset, size, fault == "restart")


def acknowledged(url):
    try:
        return stoker.status(url, timeout=1.0)["counters"]["acknowledged"]
    except stoker.StokerError:
        return 0


def check(records, st, world, dataset, size, restart):
    errors = ["consumer %d: %s (runs of %s items per loop, %d interrupts)" % (
        r, rec["error"], [[len(loop["items"]) for loop in run] for run in rec["runs"]],
        rec["interrupts"]) for r, rec in enumerate(records) if rec["error"] is not None]
    assert not errors, "; ".join(errors)
    for r, rec in enumerate(records):
        assert rec["end"] is not None, "consumer %d never got the end" % r
        assert all(s >= 1 for run in rec["runs"] for loop in run for s in loop["sizes"]), \
            "an empty batch"
    counters = st["counters"]
    assert counters["in_flight"] == 0, "left in flight: %s" % counters
    if world:
        steps = [sum(len(loop["sizes"]) for run in rec["runs"] for loop in run)
                 for rec in records]
        assert len(set(steps)) == 1, "ranks ran different numbers of steps: %s" % steps
        leftovers = {rec["leftover"] for rec in records}
        assert len(leftovers) == 1, "ranks disagree on the leftover: %s" % leftovers
        assert leftovers.pop() == counters["queued"], \
            "leftover %s, queued %d" % (records[0]["leftover"], counters["queued"])
    if restart:
        # One restart, told to each consumer once: run 0 the broker that died (each item at most
        # once per epoch), run 1 the new broker's epochs, checked whole below.
        assert all(len(rec["runs"]) == 2 for rec in records), "runs per consumer: %s" % [
            ([[(len(loop["items"]), sorted({e for e, _ in loop["items"]})) for loop in run]
              for run in rec["runs"]], rec["end"]) for rec in records]
        old = [tuple(x) for rec in records for loop in rec["runs"][0] for x in loop["items"]]
        assert len(old) == len(set(old)), "the broker that died: an item twice in an epoch"
    last = [rec["runs"][-1] for rec in records]
    got = [tuple(x) for run in last for loop in run for x in loop["items"]]
    twice = sorted({x for x in got if got.count(x) > 1}) if len(got) != len(set(got)) else []
    assert not twice, "trained twice: %s" % twice[:10]
    if dataset:
        want = {(e, i) for e in range(EPOCHS) for i in range(size)}
        assert set(got) <= want, "items outside the dataset: %s" % sorted(set(got) - want)[:5]
        missing = want - set(got)
        assert len(missing) == counters["queued"], \
            "%d items never trained, %d queued (per epoch: %s)" % (
                len(missing), counters["queued"],
                {e: sum(1 for x in got if x[0] == e) for e in range(EPOCHS)})
        assert all(e == EPOCHS - 1 for e, _ in missing), "untrained items of an earlier epoch"
    else:
        ends = {helpers_session(p): p["next_seq"] for p in st["producers"]}
        assert {s for s, _ in got} <= set(ends), "a producer the broker does not know"
        want = {(s, q) for s, n in ends.items() for q in range(n)}
        missing = want - set(got)
        assert len(missing) == counters["queued"], \
            "%d examples never trained, %d queued" % (len(missing), counters["queued"])


def helpers_session(p):
    return int(p["session"], 16) if isinstance(p["session"], str) else p["session"]


def main():
    names = sys.argv[1:] or CELLS
    unknown = [n for n in names if n not in CELLS + OPEN_CELLS]
    if unknown:
        sys.exit("unknown cells %s; the cells: %s" % (unknown, " ".join(CELLS + OPEN_CELLS)))
    tests = {}
    for name in names:
        tests["test_" + name.replace("/", "__").replace("-", "_")] = \
            lambda name=name: run_cell(name)
    helpers.run(tests)


main()
