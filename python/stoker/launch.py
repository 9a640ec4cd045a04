"""Starts the ranks of a data-parallel job on this machine, as torchrun does, for where torchrun
does not run (Debian 12's torch 1.13 on Python 3.11 fails in torchrun before starting a rank):

    python3 -m stoker.launch --nproc-per-node 2 train_ddp.py tcp://localhost:7070

Each rank is `python3 SCRIPT ARGS` with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set (a free port unless --master-port). When a rank fails, the others
are ended (SIGTERM, then SIGKILL after --grace seconds) and the launcher exits with its code;
Ctrl-C and SIGTERM reach every rank. Where torchrun works, `torchrun --nproc_per_node N` does
the same (and more: restarts, several nodes)."""

import argparse
import os
import signal
import socket
import subprocess
import sys
import time


def _free_port(addr):
    with socket.socket() as s:
        s.bind((addr, 0))
        return s.getsockname()[1]


def _end(procs, grace):
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m stoker.launch",
                                 description="Starts N ranks of SCRIPT with torchrun's "
                                 "environment; ends all when one fails.")
    ap.add_argument("--nproc-per-node", "--nproc_per_node", type=int, default=1, metavar="N")
    ap.add_argument("--master-addr", default="127.0.0.1")
    ap.add_argument("--master-port", type=int, default=0, help="default: a free port")
    ap.add_argument("--grace", type=float, default=5.0,
                    help="seconds a rank has to end after SIGTERM (default 5)")
    ap.add_argument("script")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    if a.nproc_per_node < 1:
        ap.error("--nproc-per-node must be at least 1")
    port = a.master_port or _free_port(a.master_addr)
    procs = []
    for r in range(a.nproc_per_node):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(a.nproc_per_node), LOCAL_RANK=str(r),
                   LOCAL_WORLD_SIZE=str(a.nproc_per_node), MASTER_ADDR=a.master_addr,
                   MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, a.script] + a.args, env=env))

    def forward(signum, frame):
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGINT, forward)
    signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                r, code = failed[0]
                print("stoker.launch: rank %d exited with %d; ending the others" % (r, code),
                      file=sys.stderr)
                _end(procs, a.grace)
                return code if code > 0 else 128 - code
            if all(c == 0 for c in codes):
                return 0
            time.sleep(0.05)
    finally:
        _end(procs, a.grace)


if __name__ == "__main__":
    sys.exit(main())
