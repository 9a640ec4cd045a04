"""Jobs sharing one producer pool (docs/sharing.md): several training jobs on one broker, each
getting every example exactly once while the producers make each example once. Real broker, real
producers, the Python client (threads) and stoker-pull and training processes (SIGKILLed); every
check is made from the examples' identities as each job received them:

- four jobs at once (a plain consumer, a 2-rank group, one batching by tokens, stoker-pull): each
  trained every example once, and the producers made each once (their counters equal one job's
  intake, not four); the same four kinds (one iterating epochs(2)) on one pool of a dataset;
- a job SIGKILLed mid-run and not resumed: the others go on (it ends after --job-timeout, its
  examples freed); a job resumed from its checkpoint within the timeout continues exactly from
  its commit; a job joining late gets every example made after it joined, once;
- a dataset of an odd size, 6 epochs, shared by jobs that start together (one a 2-rank group):
  every item once per epoch in every job; a job joining after the first batch gets the epoch
  being made whole at once (what the others took of it made again for it by index) and every
  item once per epoch after it; jobs that join together have those items made once for both;
- under --job-policy remake a job that lags passes items over and has them made again once it
  has room: the other job is not held back, both get every item once per epoch;
- /status, /metrics: the jobs, their counts, and the generation saved."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

from helpers import BROKER, PULL, Cluster, require, run

require("numpy")
import stoker  # noqa: E402


def ids(batch):
    return [(r.session, q) for r in batch.runs for q in range(r.first_seq, r.first_seq + r.count)]


def wait_for(what, cond, timeout=20):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def jobs_of(url):
    return {j["name"]: j for j in stoker.status(url)["jobs"]}


class Job(threading.Thread):
    """A consumer of a job in a thread: its identities in got, its error (if any) in error."""

    def __init__(self, url, batch, limit=None, **client):
        super().__init__(daemon=True)
        self.url, self.batch, self.limit, self.client = url, batch, limit, client
        self.got, self.error, self.leftover = [], None, None
        self.start()

    def run(self):
        try:
            with stoker.Client(self.url, stall_timeout=20, **self.client) as c:
                try:
                    for b in c.batches(self.batch):
                        self.got.extend(ids(b))
                        if self.limit is not None and len(self.got) >= self.limit:
                            break
                except stoker.SupplyEnded as e:
                    self.leftover = e.leftover
        except Exception as e:  # reported by the test
            self.error = repr(e)


def check_once(name, got, made):
    twice = len(got) - len(set(got))
    assert twice == 0, "job %s: %d examples twice" % (name, twice)
    missing = made - set(got)
    assert not missing, "job %s: %d examples never came, e.g. %s" % (
        name, len(missing), sorted(missing)[:3])
    assert set(got) <= made, "job %s got examples nobody made" % name


def test_four_jobs_share_one_pool_each_trains_every_example_once():
    per, lengths = 1600, "lognormal:64:256"
    with Cluster() as c:
        jobs = {
            "plain": [Job(c.url, 16, job="plain")],
            "ddp": [Job(c.url, 8, job="ddp", group="g", rank=r, world_size=2) for r in range(2)],
            "tok": [Job(c.url, 64, job="tok", max_tokens=4096)],
        }
        pull = subprocess.Popen([PULL, "--broker", c.url, "--job", "pull", "--batch-size", "12",
                                 "--stall-timeout", "20", "--format", "text"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        wait_for("four jobs", lambda: len(stoker.status(c.url).get("jobs", [])) == 4)
        for k in range(2):
            c.producer("--workload", "tokens", "--lengths", lengths, "--max-examples", str(per),
                       "--chunk", "16", "--linger", "60", name="p%d" % k)
        out, err = pull.communicate(timeout=120)
        assert pull.returncode == 3, err.decode()  # 3: the supply ended
        for threads in jobs.values():
            for t in threads:
                t.join(120)
                assert not t.is_alive(), "a job's consumer hangs"
                assert t.error is None, t.error
        st = stoker.status(c.url)
        made = {(int(p["session"], 16), q)
                for p in st["producers"] for q in range(p["next_seq"])}
        assert len(made) == 2 * per
        assert sum(p["accepted"] for p in st["producers"]) == 2 * per, "made once, not per job"
        assert st["counters"]["produced"] == 2 * per
        check_once("plain", jobs["plain"][0].got, made)
        check_once("tok", jobs["tok"][0].got, made)
        ddp = jobs["ddp"][0].got + jobs["ddp"][1].got
        assert len(jobs["ddp"][0].got) == len(jobs["ddp"][1].got), "equal steps on both ranks"
        check_once("ddp", ddp, made)
        pulled = [line for line in out.decode().splitlines() if line.strip()]
        assert len(pulled) == 2 * per, "stoker-pull --job wrote %d examples" % len(pulled)
        byname = {j["name"]: j for j in st["jobs"]}
        assert sorted(byname) == ["ddp", "plain", "pull", "tok"], byname
        for name, j in byname.items():
            assert j["made"] == 2 * per, (name, j)
            assert j["acknowledged"] == 2 * per, (name, j)
        assert st["sharing"]["jobs"] == 4 and st["sharing"]["delivered"] >= 4 * 2 * per
        assert st["sharing"]["made_per_delivered"] <= 0.25 + 1e-9, st["sharing"]
        assert {x["job"] for x in st["consumers"]} == {"plain", "ddp", "tok", "pull"}
        text = subprocess.run([sys.executable, "-m", "stoker.status", c.url],
                              capture_output=True, text=True, timeout=30)
        assert text.returncode == 0, text.stderr
        rows = [l.split() for l in text.stdout.splitlines() if l.split()[:1] == ["ddp"]]
        # Done: ended (said goodbye), or absent when it is the last job (a job alone keeps on).
        assert rows and rows[0][1] in ("ended", "absent"), text.stdout
        assert rows[0][3] == str(2 * per), text.stdout
        assert "4 jobs: %d examples made" % (2 * per) in text.stdout, text.stdout


# A job's training process: commit=True, a checkpoint (state_dict, with what it trained) every
# 4 batches, saved atomically; started again it resumes from it. Prints a line per batch.
TRAINING_PROCESS = r"""
import json, os, sys, time
import stoker
url, path, job = sys.argv[1], sys.argv[2], sys.argv[3]
saved = {"state": None, "trained": []}
if os.path.exists(path):
    with open(path) as f:
        saved = json.load(f)
trained = saved["trained"]

def checkpoint(client):
    state = client.state_dict()
    with open(path + ".tmp", "w") as f:
        json.dump({"state": state, "trained": trained}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)

with stoker.Client(url, stall_timeout=20, commit=True, job=job) as client:
    if saved["state"] is not None:
        client.load_state_dict(saved["state"])
    try:
        for i, batch in enumerate(client.batches(8)):
            trained.extend([r.session, q] for r in batch.runs
                           for q in range(r.first_seq, r.first_seq + r.count))
            time.sleep(0.01)
            if i % 4 == 3:
                checkpoint(client)
            print(i, flush=True)
    except stoker.SupplyEnded:
        pass
    checkpoint(client)
"""


def start_training(url, path, job):
    return subprocess.Popen([sys.executable, "-c", TRAINING_PROCESS, url, path, job],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def wait_lines(proc, n, timeout=30):
    deadline = time.monotonic() + timeout
    for _ in range(n):
        if time.monotonic() > deadline or not proc.stdout.readline():
            raise AssertionError("the training process stopped early: %s" % proc.stderr.read())


def test_a_job_killed_one_resumed_and_one_joining_late():
    per = 3000
    tmp = tempfile.mkdtemp(prefix="stoker-share-")
    with Cluster("--job-timeout", "6") as c:  # a resumed process is back well within it
        steady = Job(c.url, 16, job="steady")
        killed = start_training(c.url, os.path.join(tmp, "killed.json"), "killed")
        resumed_path = os.path.join(tmp, "resumed.json")
        resumed = start_training(c.url, resumed_path, "resumed")
        wait_for("three jobs", lambda: len(jobs_of(c.url)) == 3)
        for k in range(2):
            # No --linger: a commit trainer's last batches after its last checkpoint would hold
            # a lingering producer (and so the supply's end) until they are committed.
            c.producer("--max-examples", str(per), "--chunk", "8", "--delay", "0.0002:0.0002",
                       name="p%d" % k)
        wait_lines(killed, 20)
        wait_lines(resumed, 20)
        killed.kill()
        resumed.kill()
        killed.wait()
        resumed.wait()
        # The resumed job comes back within its timeout, from its checkpoint.
        resumed = start_training(c.url, resumed_path, "resumed")
        # The steady job goes on while the killed one's timeout runs, and it then ends.
        before = len(steady.got)
        wait_for("the steady job's rate", lambda: jobs_of(c.url)["steady"]["rate"] > 0)
        wait_for("the killed job to end", lambda: jobs_of(c.url)["killed"]["state"] == "ended")
        reason = jobs_of(c.url)["killed"]["end_reason"]
        assert "--job-timeout" in reason, reason
        assert len(steady.got) > before, "the steady job stood still while the killed one was away"
        # A job joining late: every example made after it joined, once.
        made_then = {int(p["session"], 16): p["next_seq"]
                     for p in stoker.status(c.url)["producers"]}
        late = Job(c.url, 16, job="late")
        out, err = resumed.communicate(timeout=120)
        assert resumed.returncode == 0, err.decode()
        for t in (steady, late):
            t.join(120)
            assert not t.is_alive() and t.error is None, t.error
        st = stoker.status(c.url)
        made = {(int(p["session"], 16), q)
                for p in st["producers"] for q in range(p["next_seq"])}
        assert len(made) == 2 * per
        check_once("steady", steady.got, made)
        with open(resumed_path) as f:
            lineage = [tuple(x) for x in json.load(f)["trained"]]
        check_once("resumed (its lineage from the checkpoint)", lineage, made)
        assert late.got, "the late job got nothing"
        assert len(late.got) == len(set(late.got))
        by_session = {}
        for s, q in late.got:
            by_session.setdefault(s, []).append(q)
        for s, seqs in by_session.items():
            seqs.sort()
            assert seqs[0] >= made_then.get(s, 0), "the late job got an example made before it"
            tail = [q for (ss, q) in made if ss == s and q >= seqs[0]]
            assert seqs == sorted(tail), "the late job missed examples made after it joined"
        byname = {j["name"]: j for j in st["jobs"]}
        assert byname["killed"]["state"] == "ended" and byname["killed"]["queued"] == 0
        assert st["counters"]["produced"] == 2 * per


def test_jobs_share_a_dataset_every_item_once_per_epoch_and_a_late_one_whole_at_once():
    n, epochs = 101, 6
    with Cluster("--dataset-size", str(n), "--epochs", str(epochs), "--shuffle-seed", "7") as c:
        per_job = {}
        errors = []

        def consume(key, count=epochs, **client):
            try:
                items = per_job.setdefault(key, {})
                with stoker.Client(c.url, stall_timeout=20, **client) as cl:
                    for epoch in cl.epochs(count, batch_size=4):
                        for batch in epoch:
                            ep, idx = batch.epoch_indices()
                            for e, i in zip(ep.tolist(), idx.tolist()):
                                items.setdefault(e, []).append(i)
            except Exception as e:  # reported below
                errors.append("%s: %r" % (key, e))

        def thread(key, **client):
            t = threading.Thread(target=consume, args=(key,), kwargs=client)
            t.start()
            return t

        threads = [thread("plain", job="plain"), thread("other", job="other")]
        threads += [thread("ddp%d" % r, job="ddp", group="g", rank=r, world_size=2)
                    for r in range(2)]
        wait_for("three jobs", lambda: len(stoker.status(c.url).get("jobs", [])) == 3)
        for _ in range(2):
            # About a second per epoch: the late job (a thread's connect, slow on a loaded
            # machine) comes well before the last epoch begins, after which it is refused.
            c.producer("--items", str(n), "--delay", "0.02:0.02", "--chunk", "4")
        wait_for("a batch", lambda: stoker.status(c.url)["counters"]["delivered"] > 0)
        # A job joining after the first batch: the epoch being made is its first, whole at once
        # (what the others took of it made again for it), then every item once per epoch.
        # Its epochs keep the dataset's numbers: those that ended before it joined come empty.
        ended = stoker.status(c.url)["dataset"]["epochs_done"]
        late = threading.Thread(target=consume, args=("late",), kwargs={"job": "late"})
        late.start()
        for t in threads + [late]:
            t.join(120)
            assert not t.is_alive(), "a job's consumer hangs"
        assert not errors, errors
        for key in ("plain", "other"):
            for e in range(epochs):
                assert sorted(per_job[key][e]) == list(range(n)), (key, e, len(per_job[key][e]))
        for e in range(epochs):
            both = per_job["ddp0"].get(e, []) + per_job["ddp1"].get(e, [])
            assert len(both) == len(set(both)), "ddp: an item twice in epoch %d" % e
            # A group's last step of an epoch is whole: items too few for both ranks are the
            # leftover, still trained by no other job of the group.
            assert n - 2 <= len(both) <= n, (e, len(both))
        late_epochs = sorted(per_job["late"])
        assert late_epochs and late_epochs[0] >= ended, (ended, late_epochs)
        assert late_epochs == list(range(late_epochs[0], epochs)), late_epochs
        for e in late_epochs:
            assert sorted(per_job["late"][e]) == list(range(n)), ("late", e)
        jobs = jobs_of(c.url)
        assert jobs["late"]["remade"] > 0, jobs["late"]  # it joined after the first batch
        assert jobs["plain"]["remade"] == 0, jobs["plain"]


class EpochJob(threading.Thread):
    """A consumer of a job iterating a dataset's epochs in a thread: per epoch the items it got
    (by their identities), the events it heard, when it finished, its error (if any)."""

    def __init__(self, url, epochs, batch=4, pause=0.0, **client):
        super().__init__(daemon=True)
        self.url, self.epochs, self.batch, self.pause, self.client = url, epochs, batch, pause, client
        self.items, self.events, self.error, self.done_at = {}, [], None, None
        self.start()

    def run(self):
        try:
            with stoker.Client(self.url, stall_timeout=30, **self.client) as cl:
                for epoch in cl.epochs(self.epochs, batch_size=self.batch):
                    for batch in epoch:
                        ep, idx = batch.epoch_indices()
                        for e, i in zip(ep.tolist(), idx.tolist()):
                            self.items.setdefault(e, []).append(i)
                        self.events.extend(cl.events())
                        time.sleep(self.pause)
                self.events.extend(cl.events())
                self.done_at = time.monotonic()
        except Exception as e:  # reported by the test
            self.error = repr(e)

    def check(self, name, n, last):
        """Every item once in each epoch it got, those epochs one after the other up to last."""
        got = sorted(self.items)
        assert got and got == list(range(got[0], last + 1)), (name, got)
        for e in got:
            assert sorted(self.items[e]) == list(range(n)), (name, e, len(self.items[e]))
        return got[0]


def test_two_jobs_joining_a_dataset_late_together_have_its_copies_made_once_for_both():
    # Two jobs join while the first epoch is half made: its items the first job took already are
    # made again by index for them, one shard for both; a producer SIGKILLed meanwhile hands
    # back what it held, copies included. Every job: every item once per epoch, its first whole.
    n, epochs = 301, 3
    with Cluster("--dataset-size", str(n), "--epochs", str(epochs), "--shuffle-seed", "5",
                 "--producer-timeout", "1") as c:
        first = EpochJob(c.url, epochs, job="first")
        wait_for("the first job", lambda: "first" in jobs_of(c.url))
        prods = [c.producer("--items", str(n), "--delay", "0.02:0.02", "--chunk", "4",
                            name="p%d" % k) for k in range(3)]
        wait_for("a third of the first epoch",
                 lambda: jobs_of(c.url)["first"]["acknowledged"] >= n // 3)
        late = [EpochJob(c.url, epochs, job="late%d" % k) for k in range(2)]
        wait_for("the late jobs", lambda: {"late0", "late1"} <= set(jobs_of(c.url)))
        time.sleep(0.3)
        prods[0].kill()  # whatever it holds, copies for the late jobs among it, goes to others
        for t in [first] + late:
            t.join(120)
            assert not t.is_alive(), "a job's consumer hangs"
            assert t.error is None, t.error
        assert first.check("first", n, epochs - 1) == 0
        for k, t in enumerate(late):
            t.check("late%d" % k, n, epochs - 1)
            # Behind in its epochs for a while (copies made for it), never said to lag.
            assert not any(e.kind == "job_remaking" for e in t.events), "late%d" % k
        st = stoker.status(c.url)
        jobs = {j["name"]: j for j in st["jobs"]}
        r0, r1 = jobs["late0"]["remade"], jobs["late1"]["remade"]
        assert r0 > 0 and r1 > 0, (r0, r1)  # both joined mid-epoch
        assert jobs["first"]["remade"] == 0, jobs["first"]
        # What the producers made beyond one job's epochs is the copies, made once for both.
        made_again = sum(p["accepted"] for p in st["producers"]) - epochs * n
        assert max(r0, r1) <= made_again < r0 + r1, (made_again, r0, r1)
        text = subprocess.run([sys.executable, "-m", "stoker.status", c.url],
                              capture_output=True, text=True, timeout=30).stdout
        rows = {l.split()[0]: l.split() for l in text.splitlines() if l.split()}
        assert rows["job"][4] == "remade" and rows["late0"][4] == str(r0), text


def test_a_late_job_that_leaves_before_its_copies_came_holds_nothing_back():
    # A job joins a dataset late and leaves (goodbye) after two batches, and another is killed
    # (no goodbye, ended after --job-timeout), both with copies still to be made for them: what
    # was to be made for them is dropped, the first job ends its epochs and the producers finish.
    n, epochs = 211, 3
    with Cluster("--dataset-size", str(n), "--epochs", str(epochs), "--job-timeout", "1") as c:
        first = EpochJob(c.url, epochs, job="first")
        wait_for("the first job", lambda: "first" in jobs_of(c.url))
        for k in range(2):
            c.producer("--items", str(n), "--delay", "0.01:0.01", "--chunk", "4", name="p%d" % k)
        wait_for("half the first epoch", lambda: jobs_of(c.url)["first"]["acknowledged"] >= n // 2)
        with stoker.Client(c.url, stall_timeout=20, job="leaves") as cl:
            it = iter(cl.batches(4))
            next(it), next(it)
        killed = subprocess.Popen([sys.executable, "-c", """
import sys, time, stoker
with stoker.Client(sys.argv[1], stall_timeout=20, job="killed") as cl:
    for b in cl.batches(4):
        print("got", flush=True)
        time.sleep(60)
""", c.url], stdout=subprocess.PIPE, text=True)
        assert killed.stdout.readline().strip() == "got"
        killed.kill()
        killed.wait()
        first.join(120)
        assert not first.is_alive(), "the first job hangs"
        assert first.error is None, first.error
        assert first.check("first", n, epochs - 1) == 0
        jobs = jobs_of(c.url)
        assert jobs["leaves"]["state"] == "ended" and jobs["killed"]["state"] == "ended", jobs
        for p in c.producers:
            assert p.wait(20) == 0, "a producer did not finish"


def test_a_lagging_job_under_the_remake_policy_does_not_hold_the_others_back():
    # A job that takes far more slowly than another passes over what it has no room for and has
    # it made again once it has room: the fast job finishes its epochs well before, both get
    # every item once per epoch, and the slow one hears why (job_remaking) and sees it counted.
    n, epochs = 200, 4
    with Cluster("--dataset-size", str(n), "--epochs", str(epochs), "--job-policy", "remake",
                 "--job-lag", "8", "--queue-depth", "16") as c:
        fast = EpochJob(c.url, epochs, batch=8, job="fast")
        slow = EpochJob(c.url, epochs, batch=8, pause=0.08, job="slow")
        wait_for("two jobs", lambda: len(jobs_of(c.url)) == 2)
        for k in range(2):
            c.producer("--items", str(n), "--delay", "0.001:0.001", "--chunk", "4",
                       name="p%d" % k)
        for t in (fast, slow):
            t.join(120)
            assert not t.is_alive(), "a job's consumer hangs"
            assert t.error is None, t.error
        assert fast.check("fast", n, epochs - 1) == 0
        assert slow.check("slow", n, epochs - 1) == 0
        # The slow job takes 8 items per 80 ms (8 s for its 800); the fast one is not held to that.
        assert fast.done_at < slow.done_at - 1.0, slow.done_at - fast.done_at
        assert any(e.kind == "job_remaking" and e.name == "slow" for e in slow.events), \
            sorted({e.kind for e in slow.events})
        jobs = jobs_of(c.url)
        assert jobs["slow"]["remade"] > 0 and jobs["fast"]["remade"] == 0, jobs
    # The policy is a dataset's: a stream's examples cannot be made again.
    r = subprocess.run([BROKER, "--listen", "ipc:///tmp/stoker-no-such", "--job-policy", "remake"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "needs a dataset" in r.stderr, (r.returncode, r.stderr)


def test_four_jobs_share_one_dataset_pool_each_every_item_once_per_epoch():
    # The done-when's mix on one pool of a dataset: a plain consumer, a 2-rank group, one
    # iterating epochs(2), one batching by tokens; producers of token sequences by index.
    n, epochs = 301, 2
    with Cluster("--dataset-size", str(n), "--epochs", str(epochs)) as c:
        got, errors = {}, []

        def consume(key, by_epochs=False, **client):
            try:
                mine = got.setdefault(key, [])
                with stoker.Client(c.url, stall_timeout=20, **client) as cl:
                    if by_epochs:
                        for epoch in cl.epochs(epochs, batch_size=8):
                            for b in epoch:
                                mine.extend(zip(*[a.tolist() for a in b.epoch_indices()]))
                        return
                    try:
                        for b in cl.batches():
                            mine.extend(zip(*[a.tolist() for a in b.epoch_indices()]))
                    except stoker.SupplyEnded:
                        pass
            except Exception as e:  # reported below
                errors.append("%s: %r" % (key, e))

        specs = [("plain", {"job": "plain", "batch_size": 16}),
                 ("epochs", {"job": "epochs", "by_epochs": True}),
                 ("tok", {"job": "tok", "max_tokens": 2048})]
        specs += [("ddp%d" % r, {"job": "ddp", "group": "g", "rank": r, "world_size": 2,
                                 "batch_size": 8}) for r in range(2)]
        threads = [threading.Thread(target=consume, args=(k,), kwargs=kw) for k, kw in specs]
        for t in threads:
            t.start()
        wait_for("four jobs", lambda: len(stoker.status(c.url).get("jobs", [])) == 4)
        for k in range(2):
            c.producer("--workload", "tokens", "--lengths", "lognormal:64:256", "--items", str(n),
                       "--delay", "0:0.0005", "--chunk", "8", name="t%d" % k,
                       stdout=subprocess.DEVNULL)
        for t in threads:
            t.join(120)
            assert not t.is_alive(), "a job's consumer hangs"
        assert not errors, errors
        want = sorted((e, i) for e in range(epochs) for i in range(n))
        for key in ("plain", "epochs", "tok"):
            assert sorted(got[key]) == want, (key, len(got[key]))
        ddp = got["ddp0"] + got["ddp1"]
        assert len(ddp) == len(set(ddp)) and set(ddp) <= set(want), "ddp"
        # The group's leftover at the end is fewer examples than its ranks.
        assert len(ddp) >= len(want) - 1, len(ddp)
        st = stoker.status(c.url)
        assert sum(p["accepted"] for p in st["producers"]) == epochs * n, "each item made once"


def test_a_lagging_job_is_detached_under_the_detach_policy():
    with Cluster("--job-policy", "detach", "--job-lag", "32") as c:
        fast = Job(c.url, 32, job="fast")
        slow_got, slow_end, events = [], [], []

        def slow():
            try:
                with stoker.Client(c.url, stall_timeout=20, job="slow") as cl:
                    try:
                        for b in cl.batches(8):
                            slow_got.extend(ids(b))
                            events.extend(cl.events())
                            time.sleep(0.05)  # a job that takes far more slowly than the other
                    except stoker.SupplyEnded as e:
                        slow_end.append(str(e))
                    events.extend(cl.events())
            except Exception as e:  # reported below
                slow_end.append("error: %r" % e)

        t = threading.Thread(target=slow, daemon=True)
        t.start()
        wait_for("two jobs", lambda: len(jobs_of(c.url)) == 2)
        # A slow trickle first, until the slow job has its first batch; then the flood.
        c.producer("--max-examples", "200", "--chunk", "8", "--delay", "0.01:0.01", name="p1")
        wait_for("the slow job's first batch", lambda: slow_got)
        c.producer("--max-examples", "20000", "--chunk", "16", "--delay", "0:0", name="p2")
        t.join(60)
        assert not t.is_alive(), "the slow job's consumer hangs"
        assert slow_end and "job 'slow' was detached" in slow_end[0], slow_end
        assert any(e.kind == "job_detached" for e in events), [e.kind for e in events]
        fast.join(120)
        assert not fast.is_alive() and fast.error is None, fast.error
        st = stoker.status(c.url)
        made = {(int(p["session"], 16), q)
                for p in st["producers"] for q in range(p["next_seq"])}
        check_once("fast", fast.got, made)
        assert len(slow_got) == len(set(slow_got)) and set(slow_got) <= made
        byname = {j["name"]: j for j in st["jobs"]}
        assert byname["slow"]["state"] == "detached", byname["slow"]
        assert "--job-lag" in byname["slow"]["end_reason"], byname["slow"]
        try:
            with stoker.Client(c.url, stall_timeout=5, job="slow") as again:
                next(iter(again.batches(4)))
            raise AssertionError("a consumer of a detached job was taken back")
        except stoker.StokerError as e:
            assert "detached" in str(e), str(e)


def test_the_torch_dataset_names_its_job():
    torch = require("torch")
    from stoker.torch import StokerIterableDataset
    with Cluster() as c:
        seen = {}

        def train(job):
            ds = StokerIterableDataset(c.url, 16, job=job, max_batches=40, stall_timeout=20)
            loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0)
            seen[job] = sum(int(t["input"].shape[0]) for t in loader)

        threads = [threading.Thread(target=train, args=(j,)) for j in ("a", "b")]
        for t in threads:
            t.start()
        wait_for("two jobs", lambda: len(jobs_of(c.url)) == 2)
        c.producer("--delay", "0:0", "--max-examples", "640", "--chunk", "16")
        for t in threads:
            t.join(60)
        assert seen == {"a": 640, "b": 640}, seen
        st = stoker.status(c.url)
        assert {x["job"] for x in st["consumers"]} == {"a", "b"}
        assert st["counters"]["produced"] == 640, "made once for both jobs"


def test_the_sharing_page_runs_as_written():
    """docs/sharing.md: its producers as the page starts them, and its train.py run as its sweep
    line runs it (four jobs at once), against a test broker (the page's address replaced)."""
    import re
    here = os.path.dirname(__file__)
    root = os.environ.get("STOKER_SOURCE_ROOT", os.path.join(here, "..", ".."))
    with open(os.path.join(root, "docs", "sharing.md")) as f:
        page = f.read()
    shells = re.findall(r"^```sh\n(.*?)^```", page, re.S | re.M)
    code = re.search(r"^```python\n(.*?)^```", page, re.S | re.M).group(1)
    starts = [line.split() for line in shells[0].splitlines()
              if line.startswith("stoker-producer")]
    assert len(starts) == 2, shells[0]
    sweep = re.search(r"for lr in ([0-9. ]+); do python3 train.py", shells[1])
    assert sweep, shells[1]
    lrs = sweep.group(1).split()
    assert len(lrs) == 4, lrs
    with Cluster() as c, tempfile.TemporaryDirectory(prefix="stoker-doc-") as tmp:
        path = os.path.join(tmp, "train.py")
        with open(path, "w") as f:
            f.write(code.replace("tcp://localhost:7070", c.url))
        jobs = [subprocess.Popen([sys.executable, path, lr], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, cwd=tmp) for lr in lrs]
        wait_for("four jobs", lambda: len(stoker.status(c.url).get("jobs", [])) == 4)
        for words in starts:
            c.producer(*words[words.index("--name") + 2:-1], name=words[words.index("--name") + 1])
        for lr, p in zip(lrs, jobs):
            out, err = p.communicate(timeout=120)
            print(out.decode(errors="replace"), err.decode(errors="replace")[-1500:])
            assert p.returncode == 0, "docs/sharing.md's train.py %s failed" % lr
            assert b"2000 examples" in out, out
        st = stoker.status(c.url)
        assert st["counters"]["produced"] < 2 * 2000, "the examples were made once, not per job"


if __name__ == "__main__":
    run(globals())
