#!/usr/bin/env python3
"""Multi-host test of stoker, with network namespaces as hosts.

The topology of docker/compose.trainer.yml + docker/compose.producers.yml, on one machine:

    namespace <prefix>-gpu : bridge br0 10.200.0.1/16; stoker-broker (tcp://10.200.0.1:7070,
                             metrics http://10.200.0.1:9090) and stoker-trainer
    namespace <prefix>-cpu1: eth0 10.200.1.1/16, two stoker-producer (cpu1-a, cpu1-b)
    namespace <prefix>-cpu2: eth0 10.200.2.1/16, two stoker-producer (cpu2-a, cpu2-b)

Each CPU host's eth0 is one end of a veth pair whose other end (cpu1, cpu2) is a port of the GPU
host's bridge: the cable. The links are made inside the namespaces, so nothing appears in the
root namespace, and deleting the namespaces removes them. Phases:

  1. all four producers feed the trainer;
  2. the cable of cpu1 is cut (`ip link set cpu1 down` on the GPU host; no FIN, no RST): the
     broker must report both of cpu1's producers lost within --producer-timeout + 1 s, and the
     trainer keeps training on cpu2's;
  3. the cable is restored: cpu1's producers reconnect (producer_reconnected) and push again;
  4. every producer is killed: the trainer exits 3 (supply_ended), having saved its weights, with
     audit discrepancy 0 and duplicates_seen 0 over the whole run.

Times are measured on this script's monotonic clock. The broker's event times (`at`, seconds since
it started) are placed on that clock with its /status uptime; the offset is taken so that it can
only make a latency look longer. The trainer's own event times are checked and reported too.

Usage: test_cluster.py (binaries from STOKER_BROKER_BIN, STOKER_PRODUCER_BIN, STOKER_TRAINER_BIN).
Needs root and `ip netns`; otherwise exits 77 (skip) saying why. Removes every namespace, link and
process it made, also when it fails or is interrupted.
"""
import ctypes
import http.client
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

SKIP = 77
PRODUCER_TIMEOUT = 2.0  # broker --producer-timeout, seconds
DETECT_LIMIT = PRODUCER_TIMEOUT + 1.0  # the requirement: lost within timeout + 1 s
RECONNECT_LIMIT = 20.0  # link back -> producer_reconnected (TCP retransmission backoff included)
BROKER_IP = "10.200.0.1"
BROKER_URL = f"tcp://{BROKER_IP}:7070"
METRICS_PORT = 9090
HOSTS = {"cpu1": "10.200.1.1/16", "cpu2": "10.200.2.1/16"}
PRODUCERS = [(host, f"{host}-{x}") for host in HOSTS for x in ("a", "b")]
CUT_HOST = "cpu1"
CLONE_NEWNET = 0x40000000
# Extra seconds the cable stays cut (experiments; the producers wait for the broker up to --broker-wait, 600 s by default).
HOLD = float(os.environ.get("STOKER_CLUSTER_HOLD", "0"))

T0 = time.monotonic()


def log(msg):
    print(f"[{time.monotonic() - T0:6.2f}] {msg}", flush=True)


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def check(cond, msg):
    if not cond:
        raise Failure(msg)


def ip(*args, fail=Failure):
    r = subprocess.run(["ip", *args], stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if r.returncode != 0:
        raise fail(f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")
    return r.stdout


def run_netns_mounted():
    """Whether /run/netns is a mount point (`ip netns add` bind-mounts it onto itself, which
    os.path.ismount cannot see)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == "/run/netns" for line in f)


class NetnsHttp:
    """HTTP GETs made from inside a network namespace, by one thread that joined it (setns(2)
    changes only the calling thread's namespace; this script's own stays the root one)."""

    def __init__(self, netns):
        self.requests = queue.Queue()
        ready = queue.Queue()
        libc = ctypes.CDLL(None, use_errno=True)

        def main():
            try:
                fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
                try:
                    if libc.setns(fd, CLONE_NEWNET) != 0:
                        err = ctypes.get_errno()
                        raise OSError(err, f"setns({netns}): {os.strerror(err)}")
                finally:
                    os.close(fd)
            except Exception as e:  # reported to the constructor
                ready.put(e)
                return
            ready.put(None)
            while True:
                item = self.requests.get()
                if item is None:
                    return
                host, port, path, reply = item
                try:
                    c = http.client.HTTPConnection(host, port, timeout=2)
                    c.request("GET", path)
                    r = c.getresponse()
                    reply.put((r.status, r.read()))
                    c.close()
                except Exception as e:
                    reply.put(e)

        self.thread = threading.Thread(target=main, daemon=True)
        self.thread.start()
        err = ready.get()
        if err is not None:
            raise err

    def get(self, host, port, path):
        reply = queue.Queue()
        self.requests.put((host, port, path, reply))
        r = reply.get()
        if isinstance(r, Exception):
            raise r
        return r

    def close(self):
        self.requests.put(None)


class Cluster:
    def __init__(self, bins, workdir):
        self.bins = bins
        self.dir = workdir
        prefix = f"stoker-{os.getpid()}"
        self.ns = {h: f"{prefix}-{h}" for h in ["gpu", *HOSTS]}
        self.made_ns = []
        self.mounted_run_netns = False
        self.procs = {}  # name -> (Popen, log path)
        self.http = None
        self.broker_origin = None  # the broker's start on our clock (an upper bound)
        self.last_status = None

    # --- topology --------------------------------------------------------------------------

    def setup(self):
        was_mount = run_netns_mounted()
        for h, ns in self.ns.items():
            ip("netns", "add", ns, fail=Skip)
            self.made_ns.append(ns)
            if not was_mount and run_netns_mounted():
                self.mounted_run_netns = True
            ip("-n", ns, "link", "set", "lo", "up")
        gpu = self.ns["gpu"]
        ip("-n", gpu, "link", "add", "br0", "type", "bridge", fail=Skip)
        ip("-n", gpu, "addr", "add", f"{BROKER_IP}/16", "dev", "br0")
        ip("-n", gpu, "link", "set", "br0", "up")
        for h, addr in HOSTS.items():
            ip("-n", gpu, "link", "add", h, "type", "veth", "peer", "name", "eth0",
               "netns", self.ns[h], fail=Skip)
            ip("-n", gpu, "link", "set", h, "master", "br0")
            ip("-n", gpu, "link", "set", h, "up")
            ip("-n", self.ns[h], "addr", "add", addr, "dev", "eth0")
            ip("-n", self.ns[h], "link", "set", "eth0", "up")
        log("hosts: " + ", ".join(f"{h}={ns}" for h, ns in self.ns.items()))

    def cable(self, host, up):
        ip("-n", self.ns["gpu"], "link", "set", host, "up" if up else "down")

    # --- processes -------------------------------------------------------------------------

    def start(self, host, name, argv):
        path = os.path.join(self.dir, f"{name}.log")
        with open(path, "wb") as f:
            p = subprocess.Popen(["ip", "netns", "exec", self.ns[host], *argv],
                                 stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
        self.procs[name] = (p, path)
        return p

    def start_producer(self, host, name):
        return self.start(host, name, [self.bins["producer"], "--broker", BROKER_URL,
                                       "--name", name, "--delay", "0.005:0.02",
                                       "--seed", str(len(self.procs) + 1)])

    # --- broker status ---------------------------------------------------------------------

    def status(self):
        if self.http is None:
            self.http = NetnsHttp(self.ns["gpu"])
        code, body = self.http.get(BROKER_IP, METRICS_PORT, "/status")
        after = time.monotonic()
        check(code == 200, f"/status answered HTTP {code}")
        st = json.loads(body)
        # uptime was measured before `after`: after - uptime is never earlier than the start.
        origin = after - st["uptime_s"]
        if self.broker_origin is None or origin < self.broker_origin:
            self.broker_origin = origin
        self.last_status = st
        return st

    def wait_status(self, what, pred, timeout, every=0.05, starting=False):
        deadline = time.monotonic() + timeout
        while True:
            try:
                st = self.status()
            except OSError as e:  # refused while the broker starts
                if not starting or time.monotonic() > deadline:
                    raise Failure(f"/status unreachable waiting for {what}: {e}")
                st = None
            if st is not None and pred(st):
                return st
            if time.monotonic() > deadline:
                raise Failure(f"timed out after {timeout:.1f} s waiting for {what}; "
                              f"last /status: {json.dumps(st)}")
            for name, (p, _) in self.procs.items():
                check(p.poll() is None, f"{name} exited early (code {p.returncode}) "
                                         f"while waiting for {what}")
            time.sleep(every)

    def event_time(self, ev):
        """A broker event's time on our clock (never earlier than it really happened)."""
        return self.broker_origin + ev["at"]

    # --- cleanup ---------------------------------------------------------------------------

    def dump_logs(self, lines=25):
        for name, (_, path) in self.procs.items():
            try:
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
            except OSError:
                continue
            print(f"----- {name} ({path}), last {len(tail)} lines", flush=True)
            sys.stdout.write("".join(tail))
        if self.last_status is not None:
            print("----- last /status\n" + json.dumps(self.last_status), flush=True)

    def cleanup(self):
        t = time.monotonic()
        if self.http is not None:
            self.http.close()
        for name, (p, _) in self.procs.items():
            if p.poll() is None:
                p.kill()
        for name, (p, _) in self.procs.items():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                log(f"cleanup: {name} (pid {p.pid}) did not die")
        for ns in self.made_ns:
            # Anything still inside a namespace of ours was started by this run.
            r = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            r = subprocess.run(["ip", "netns", "del", ns], capture_output=True, text=True)
            if r.returncode != 0:
                log(f"cleanup: cannot delete namespace {ns}: {r.stderr.strip()}")
        self.made_ns = []
        # `ip netns add` bind-mounts /run/netns the first time; undo that only if this run did
        # it and no namespace is left there (a parallel user's namespace makes umount fail).
        if self.mounted_run_netns and not os.listdir("/run/netns"):
            subprocess.run(["umount", "/run/netns"], capture_output=True)
        log(f"cleaned up in {time.monotonic() - t:.2f} s")


def lost_or_reconnected(st, kind, names, since_index):
    return {e["name"]: e for e in st["events"]
            if e["kind"] == kind and e["name"] in names and e["index"] > since_index}


def run(cl, workdir):
    bins = cl.bins
    cut_names = [n for h, n in PRODUCERS if h == CUT_HOST]
    kept_names = [n for h, n in PRODUCERS if h != CUT_HOST]
    json_path = os.path.join(workdir, "summary.json")
    weights_path = os.path.join(workdir, "weights.safetensors")

    cl.setup()
    cl.start("gpu", "broker", [bins["broker"], "--listen", BROKER_URL,
                               "--metrics", f"http://{BROKER_IP}:{METRICS_PORT}",
                               "--producer-timeout", f"{PRODUCER_TIMEOUT:g}",
                               "--queue-depth", "64"])
    cl.wait_status("the broker's /status", lambda st: True, timeout=10, starting=True)
    log(f"broker up at {BROKER_URL}")

    # The trainer runs until the supply ends (phase 4): rounds and time goal are only backstops.
    trainer = cl.start("gpu", "trainer", [
        bins["trainer"], "--broker", BROKER_URL, "--device", "cpu", "--rounds", "1000000",
        "--time-goal", "100", "--stall-timeout", "10", "--progress", "off",
        "--json", json_path, "--weights", weights_path])
    for host, name in PRODUCERS:
        cl.start_producer(host, name)

    def by_name(st):
        return {p["name"]: p for p in st["producers"]}

    # 1. all four feed the trainer.
    st = cl.wait_status(
        "all four producers alive and acknowledged",
        lambda st: all(n in by_name(st) and by_name(st)[n]["state"] == "alive"
                       and by_name(st)[n]["acknowledged"] > 0 for _, n in PRODUCERS),
        timeout=15)
    time.sleep(1.0)
    st = cl.status()
    log("phase 1: all producers feeding: " + ", ".join(
        f"{n} acked {by_name(st)[n]['acknowledged']}" for _, n in PRODUCERS))
    mark = max((e["index"] for e in st["events"]), default=0)

    # 2. cut cpu1's cable.
    t_cut = time.monotonic()  # taken before the cut: latencies can only come out longer
    cl.cable(CUT_HOST, up=False)
    log(f"phase 2: cable of {CUT_HOST} cut")
    st = cl.wait_status(
        f"{CUT_HOST}'s producers lost",
        lambda st: len(lost_or_reconnected(st, "producer_lost", cut_names, mark)) == 2,
        timeout=DETECT_LIMIT + 5)
    lost = lost_or_reconnected(st, "producer_lost", cut_names, mark)
    detect = {n: cl.event_time(e) - t_cut for n, e in lost.items()}
    for n, e in lost.items():
        log(f"  {n} lost after {detect[n]:.3f} s (limit {DETECT_LIMIT:g} s): {e['reason']}")
        check(detect[n] <= DETECT_LIMIT,
              f"{n} reported lost {detect[n]:.3f} s after the cut (limit {DETECT_LIMIT:g} s)")
    check(all(by_name(st)[n]["state"] == "alive" for n in kept_names),
          f"producers of the other host lost too: {json.dumps(st['producers'])}")
    # ... and the trainer keeps training on the others.
    acked0 = st["counters"]["acknowledged"]
    kept0 = {n: by_name(st)[n]["acknowledged"] for n in kept_names}
    time.sleep(1.5 + HOLD)
    st = cl.status()
    acked1 = st["counters"]["acknowledged"]
    log(f"  training goes on while cut: acknowledged {acked0} -> {acked1} "
        f"in {1.5 + HOLD:g} s")
    check(acked1 > acked0, f"training stalled during the cut ({acked0} -> {acked1})")
    for n in kept_names:
        check(by_name(st)[n]["state"] == "alive" and by_name(st)[n]["acknowledged"] > kept0[n],
              f"{n} (uncut) stopped being trained on during the cut: {by_name(st)[n]}")
    mark = max(e["index"] for e in st["events"])
    accepted_cut = {n: by_name(st)[n]["accepted"] for n in cut_names}

    # 3. restore it: cpu1's producers reconnect and push again.
    t_restore = time.monotonic()
    cl.cable(CUT_HOST, up=True)
    log(f"phase 3: cable of {CUT_HOST} restored after {t_restore - t_cut:.2f} s")
    st = cl.wait_status(
        f"{CUT_HOST}'s producers reconnected",
        lambda st: len(lost_or_reconnected(st, "producer_reconnected", cut_names, mark)) == 2,
        timeout=RECONNECT_LIMIT)
    back = lost_or_reconnected(st, "producer_reconnected", cut_names, mark)
    reconnect = {n: cl.event_time(e) - t_restore for n, e in back.items()}
    for n, e in back.items():
        log(f"  {n} reconnected {reconnect[n]:.3f} s after the link returned ({e['reason']})")
    st = cl.wait_status(
        f"{CUT_HOST}'s producers pushing again",
        lambda st: all(by_name(st)[n]["state"] == "alive"
                       and by_name(st)[n]["accepted"] > accepted_cut[n] + 20
                       for n in cut_names),
        timeout=10)
    log("  pushing again: " + ", ".join(
        f"{n} accepted {accepted_cut[n]} -> {by_name(st)[n]['accepted']}" for n in cut_names))
    time.sleep(0.5)

    # 4. kill every producer: the supply ends.
    t_kill = time.monotonic()
    for _, n in PRODUCERS:
        cl.procs[n][0].kill()
    log("phase 4: every producer killed")
    try:
        rc = trainer.wait(timeout=20)
    except subprocess.TimeoutExpired:
        raise Failure("the trainer did not stop within 20 s of the supply ending")
    t_exit = time.monotonic()
    log(f"  trainer exited {rc} after {t_exit - t_kill:.2f} s")
    check(os.path.exists(json_path), "the trainer wrote no JSON summary")
    with open(json_path) as f:
        summary = json.load(f)
    log("  summary: " + json.dumps({k: summary.get(k) for k in
                                     ("status", "reason", "examples", "seconds", "audit")}))
    check(rc == 3, f"trainer exit code {rc}, expected 3 (supply ended)")
    check(summary["status"] == "supply_ended", f"trainer status {summary['status']}")
    audit = summary["audit"]
    check(audit is not None, "the summary has no audit")
    check(audit["discrepancy"] == 0, f"audit discrepancy {audit['discrepancy']}")
    check(audit["duplicates_seen"] == 0, f"audit duplicates_seen {audit['duplicates_seen']}")
    check(summary["examples"] > 0 and audit["acknowledged"] > 0, "nothing was trained")
    # The weights: a safetensors file (8-byte header length, JSON header, data).
    check(os.path.exists(weights_path), "no weights file saved")
    with open(weights_path, "rb") as f:
        blob = f.read()
    n = int.from_bytes(blob[:8], "little") if len(blob) >= 8 else 0
    check(0 < n <= len(blob) - 8, f"weights file is not safetensors ({len(blob)} bytes)")
    json.loads(blob[8:8 + n])
    log(f"  weights saved: {len(blob)} bytes")

    # The trainer heard of the loss and the reconnection, with the producers' names, in time.
    # Its `at` counts from a moment after its start that this script cannot see, so its clock
    # is tied to ours by causality: the last event it recorded (a loss from the final kill)
    # happened after t_kill (taken before the kills) and before its exit was seen. That bounds
    # each of its event times from both sides.
    ev = summary["events"]
    check(ev and ev[-1]["kind"] == "producer_lost", f"the trainer's last event is not the "
          f"final kill's loss: {ev[-1:] if ev else ev}")
    at_last = ev[-1]["at"]

    def on_our_clock(e):
        return t_kill - (at_last - e["at"]), t_exit - (at_last - e["at"])

    for name in cut_names:
        mine = [e for e in ev if e["name"] == name and e["kind"] in ("producer_lost",
                                                                     "producer_reconnected")]
        tl = [e for e in mine if e["kind"] == "producer_lost"]
        tr = [e for e in mine if e["kind"] == "producer_reconnected"]
        check(len(tl) >= 2 and tr and mine[0] is tl[0] and mine[-1] is tl[-1]
              and mine[-2]["kind"] == "producer_reconnected",
              f"the trainer's summary should have {name} lost (cut), reconnected, lost (kill): "
              f"{mine}")
        lost_lo, lost_hi = (t - t_cut for t in on_our_clock(tl[0]))
        back_lo, back_hi = (t - t_restore for t in on_our_clock(tr[0]))
        log(f"  trainer: {name} lost {lost_lo:.3f}..{lost_hi:.3f} s after the cut, "
            f"reconnected {back_lo:.3f}..{back_hi:.3f} s after the restore")
        # The lower bound is short of the truth only by the final kill's detection (ms).
        check(0 <= lost_lo <= DETECT_LIMIT,
              f"the trainer heard of {name}'s loss {lost_lo:.3f} s after the cut "
              f"(limit {DETECT_LIMIT:g} s)")
        check(back_hi >= 0, f"{name} reconnected before the cable was back: {tr[0]}")
        if len(tl) > 2:  # lost again after reconnecting, then back: reported, not fatal
            log(f"  NOTE: {name} flapped after the restore: {mine[1:-1]}")
    for name in kept_names:
        check(len([e for e in ev if e["kind"] == "producer_lost" and e["name"] == name]) == 1,
              f"the trainer saw {name} (uncut) lost before the final kill: {ev}")
    log(f"PASS: detection {max(detect.values()):.3f} s (limit {DETECT_LIMIT:g}), "
        f"reconnection {max(reconnect.values()):.3f} s after the link returned, "
        f"{summary['examples']} examples, no duplicate, discrepancy 0")


def main():
    bins = {k: os.environ.get(f"STOKER_{k.upper()}_BIN", "") for k in
            ("broker", "producer", "trainer")}
    if os.geteuid() != 0:
        print("SKIP: needs root for network namespaces (ip netns)")
        return SKIP
    if shutil.which("ip") is None:
        print("SKIP: iproute2's `ip` is not installed")
        return SKIP
    for k, path in bins.items():
        if not os.access(path, os.X_OK):
            print(f"FAIL: STOKER_{k.upper()}_BIN ({path!r}) is not an executable")
            return 1

    # meson's timeout and ^C end the run through the `finally` below.
    def interrupted(signum, frame):
        raise Failure(f"interrupted by signal {signum}")
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGINT, interrupted)

    workdir = tempfile.mkdtemp(prefix="stoker-cluster-")
    cl = Cluster(bins, workdir)
    ok = False
    try:
        run(cl, workdir)
        ok = True
        return 0
    except Skip as e:
        print(f"SKIP: network namespaces unusable here: {e}")
        return SKIP
    except Failure as e:
        print(f"FAIL: {e}", flush=True)
        cl.dump_logs()
        return 1
    except Exception:
        traceback.print_exc()
        print("FAIL: unexpected error", flush=True)
        cl.dump_logs()
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        cl.cleanup()
        if ok and not os.environ.get("STOKER_CLUSTER_KEEP"):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            print(f"(logs kept in {workdir})", flush=True)


if __name__ == "__main__":
    sys.exit(main())
