#!/usr/bin/env python3
"""Run inside the clean Debian 12 container of debian-install.sh with the packaged python3-stoker
(no PYTHONPATH, no STOKER_LIB): trains a linear model with numpy SGD on the batches of the
packaged broker and producers (systemd services), SIGKILLs the broker once after KILL_AFTER
examples, and trains on until the supply ends. Writes a JSON report: the examples trained per
producer session, how many identities came twice, the losses, the broker's PIDs.

    clean_train.py URL KILL_AFTER REPORT"""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import stoker

url, kill_after, report_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]


def broker_pid():
    return int(subprocess.run(["systemctl", "show", "-p", "MainPID", "--value",
                               "stoker-broker.service"], capture_output=True, text=True,
                              check=True).stdout.strip())


seen = {}  # session -> list of seqs
w = np.zeros((10, 1), dtype=np.float32)
b = np.zeros(1, dtype=np.float32)
losses = []
killed_pid = None
examples = 0
ended = None
t0 = time.monotonic()
client = stoker.Client(url, batch_size=32, stall_timeout=45.0)
with client:
    try:
        for batch in client.batches():
            x, y = batch["input"], batch["output"]
            pred = x @ w + b
            err = pred - y
            losses.append(float((err ** 2).mean()))
            w -= 0.05 * (x.T @ err) / len(x)
            b -= 0.05 * err.mean(axis=0)
            sessions, seqs = batch.identities()
            for s, q in zip(sessions.tolist(), seqs.tolist()):
                seen.setdefault(s, []).append(q)
            examples += batch.count
            if killed_pid is None and examples >= kill_after:
                killed_pid = broker_pid()
                os.kill(killed_pid, signal.SIGKILL)
                print(f"SIGKILLed the broker (pid {killed_pid}) after {examples} examples",
                      flush=True)
    except stoker.SupplyEnded as e:
        ended = f"supply ended: {e}"
    except stoker.StokerError as e:
        ended = f"error: {type(e).__name__}: {e}"
report = {
    "stoker_file": stoker.__file__,
    "version": stoker.__version__,
    "ended": ended,
    "seconds": round(time.monotonic() - t0, 2),
    "examples": examples,
    "killed_pid": killed_pid,
    "broker_pid_after": broker_pid(),
    "client_duplicates": client.duplicates(),
    "per_session": {str(s): {"count": len(q), "distinct": len(set(q)), "min": min(q),
                             "max": max(q)} for s, q in seen.items()},
    "loss_first": float(np.mean(losses[:20])) if losses else None,
    "loss_last": float(np.mean(losses[-20:])) if losses else None,
}
json.dump(report, open(report_path, "w"), indent=1)
print(json.dumps(report, indent=1))
