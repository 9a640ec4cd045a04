#!/usr/bin/env python3
"""What the live page costs the broker: the broker's CPU (utime + stime from
/proc/PID/stat) over the same steady workload without a viewer, with one headless Chromium
showing the page (it polls /status once a second), and without again; side by side in one run.
Then, with a viewer open for a while and one producer SIGKILLed, the page's screenshot (the one
docs/ and the README show) is written to --shot.

  python3 bench/live_page_cpu.py [--seconds 30] [--shot docs/live-page.png]

Needs a build (build/) and Debian's chromium (tests/live/live.py installs it when root)."""

import argparse
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "live"))
os.environ.setdefault("STOKER_BROKER_BIN", os.path.join(ROOT, "build/server/stoker-broker"))
os.environ.setdefault("STOKER_PRODUCER_BIN", os.path.join(ROOT, "build/producer/stoker-producer"))
os.environ.setdefault("STOKER_TRAINER_BIN", os.path.join(ROOT, "build/trainer/stoker-trainer"))
from live import Broker, Chromium  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def measure(b, seconds, label, wait=time.sleep):
    c0, s0, t0 = cpu_s(b.broker.pid), b.status(), time.monotonic()
    wait(seconds)
    c1, s1, t1 = cpu_s(b.broker.pid), b.status(), time.monotonic()
    cpu = (c1 - c0) / (t1 - t0)
    rate = (s1["counters"]["acknowledged"] - s0["counters"]["acknowledged"]) / (
        s1["uptime_s"] - s0["uptime_s"])
    print("%-22s broker CPU %5.1f %% of a core, %7.0f examples/s trained" % (label, 100 * cpu,
                                                                          rate), flush=True)
    return cpu, rate


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--shot", default=None)
    a = ap.parse_args()
    with Broker() as b:
        for i in range(1, 5):
            b.producer("aug-%d" % i, "--delay", "0.001:0.002")
        b.trainer("--rounds", "100000000", "--time-goal", "3600", "--stall-timeout", "30")
        time.sleep(3)  # all joined, rates steady
        rows = [measure(b, a.seconds, "no viewer")]
        with Chromium() as chrome:
            chrome.navigate(b.http + "/")
            chrome.pump(2)
            before = sum(1 for u in chrome.requests() if u.endswith("/status"))
            # pump: read the browser's events meanwhile (it keeps polling either way)
            rows.append(measure(b, a.seconds, "one viewer (1 poll/s)", chrome.pump))
            polls = sum(1 for u in chrome.requests() if u.endswith("/status")) - before
            print("the viewer's requests to /status meanwhile: %d" % polls)
        rows.append(measure(b, a.seconds, "no viewer again"))
        base = (rows[0][0] + rows[2][0]) / 2
        print("viewer / no viewer: %.3f (CPU %.2f %% vs %.2f %% of a core; +%.2f points)"
              % (rows[1][0] / base, 100 * rows[1][0], 100 * base, 100 * (rows[1][0] - base)))
        if a.shot:
            with Chromium() as chrome:
                chrome.navigate(b.http + "/")
                chrome.pump(25)
                victim = b.procs[3]
                os.kill(victim.pid, signal.SIGKILL)
                chrome.pump(4)
                chrome.screenshot(a.shot)
                print("screenshot %s" % a.shot)

        # One /status alone: the broker idle (producers and trainer stopped), then N requests
        # back to back; the CPU beyond idle's, per request.
        for p in b.procs:
            os.kill(p.pid, signal.SIGSTOP)
        time.sleep(1)
        c0, t0 = cpu_s(b.broker.pid), time.monotonic()
        time.sleep(5)
        idle = (cpu_s(b.broker.pid) - c0) / (time.monotonic() - t0)
        n = 500
        c0, t0 = cpu_s(b.broker.pid), time.monotonic()
        for _ in range(n):
            b.status()
        dt = time.monotonic() - t0
        per = (cpu_s(b.broker.pid) - c0 - idle * dt) / n
        print("one /status (4 producers, %d events): %.3f ms of broker CPU (idle broker %.2f %% "
              "of a core); one viewer: %.3f %% of a core" % (len(b.status()["events"]),
                                                             1000 * per, 100 * idle, 100 * per))
        for p in b.procs:
            os.kill(p.pid, signal.SIGCONT)


if __name__ == "__main__":
    main()
