#!/usr/bin/env python3
"""Checks stoker-trainer's outputs with Python's own readers, not stoker's.

  check.py summary PATH [--status S] [--reason-starts TEXT] [--rounds N] [--batch-size N]
                        [--loss-halved] [--no-audit-identity]
      PATH holds the trainer's JSON summary (docs/design.md): every field present with the right
      type, the audit consistent (discrepancy 0, duplicates_seen 0), examples consistent with
      batches.
  check.py safetensors PATH --inputs N --hidden A,B,... --outputs N
      The header JSON, dtype F32, contiguous offsets covering the data, tensor names
      layers.N.weight / layers.N.bias with the MLP's shapes; numpy's reading when importable.

Exit 0 when everything holds, 1 with a message on stderr otherwise.
"""
import argparse
import json
import math
import struct
import sys


def fail(msg):
    print("check.py: " + msg, file=sys.stderr)
    sys.exit(1)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_num(v):
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


STATUSES = {"completed", "time_goal", "supply_ended", "stalled", "interrupted", "error",
            "group_broken", "broker_lost"}
EVENT_KINDS = {"producer_joined", "producer_lost", "producer_finished", "producer_reconnected"}


def check_summary(a):
    try:
        with open(a.path) as f:
            text = f.read()
        s = json.loads(text)
    except (OSError, ValueError) as e:
        fail("%s: not a JSON object: %s" % (a.path, e))
    if not isinstance(s, dict):
        fail("the summary is not an object: %r" % (s,))
    want = {
        "status": str, "reason": str, "device": str, "rounds": int, "batches": int,
        "examples": int, "seconds": float, "examples_per_second": float,
        "final_loss": float, "data_wait_fraction": float, "audit": dict, "events": list,
    }
    if s.get("status") in ("error", "broker_lost") and s.get("audit", 0) is None:
        # A run that failed before it reached a broker, or whose broker went away, has nothing
        # to audit.
        want["audit"] = type(None)
    for k, t in want.items():
        if k not in s:
            fail("field %r missing from %s" % (k, text.strip()))
        v = s[k]
        ok = {str: lambda v: isinstance(v, str), int: lambda v: is_int(v) and v >= 0,
              float: is_num, dict: lambda v: isinstance(v, dict),
              list: lambda v: isinstance(v, list), type(None): lambda v: v is None}[t](v)
        if not ok:
            fail("field %r has the wrong type or value: %r" % (k, v))
    if s["status"] not in STATUSES:
        fail("status %r is not one of %s" % (s["status"], sorted(STATUSES)))
    if s["device"] not in ("cpu", "gpu"):
        fail("device %r is not cpu or gpu" % s["device"])
    if not s["reason"]:
        fail("reason is empty")
    if s["seconds"] < 0 or s["examples_per_second"] < 0:
        fail("negative time or rate")
    if not 0 <= s["data_wait_fraction"] <= 1:
        fail("data_wait_fraction %r outside [0, 1]" % s["data_wait_fraction"])
    audit = s["audit"]
    if audit is None:
        audit = {"produced": 0, "acknowledged": 0, "still_queued": 0, "in_flight": 0,
                 "redelivered": 0, "returned_unused": 0, "duplicates_seen": 0,
                 "discrepancy": 0}
    for k in ("produced", "acknowledged", "still_queued", "in_flight", "redelivered",
              "returned_unused", "duplicates_seen", "discrepancy"):
        if k not in audit or not is_int(audit[k]):
            fail("audit field %r missing or not an integer: %r" % (k, audit))
    if audit["discrepancy"] != 0:
        fail("audit discrepancy %d != 0: %r" % (audit["discrepancy"], audit))
    if audit["produced"] != (audit["acknowledged"] + audit["still_queued"] + audit["in_flight"]):
        fail("produced != acknowledged + still_queued + in_flight: %r" % audit)
    if audit["duplicates_seen"] != 0:
        fail("duplicates_seen %d != 0" % audit["duplicates_seen"])
    if s["audit"] is not None and audit["acknowledged"] < s["examples"] and \
            s["status"] != "error":
        # Every batch trained on is acknowledged before the trainer fetches the audit.
        fail("acknowledged %d < examples trained %d" % (audit["acknowledged"], s["examples"]))
    for e in s["events"]:
        if not isinstance(e, dict):
            fail("event is not an object: %r" % (e,))
        for k, t in (("kind", str), ("producer", int), ("name", str), ("at", float),
                     ("reason", str)):
            if k not in e:
                fail("event field %r missing: %r" % (k, e))
            if t is int and not is_int(e[k]) or t is float and not is_num(e[k]) or \
                    t is str and not isinstance(e[k], str):
                fail("event field %r has the wrong type: %r" % (k, e))
        if e["kind"] not in EVENT_KINDS:
            fail("event kind %r unknown" % e["kind"])
    if a.status is not None and s["status"] != a.status:
        fail("status %r (%s), expected %r" % (s["status"], s["reason"], a.status))
    if a.reason_starts is not None and not s["reason"].startswith(a.reason_starts):
        fail("reason %r does not start with %r" % (s["reason"], a.reason_starts))
    if a.batch_size is not None:
        b = a.batch_size
        if s["examples"] > s["batches"] * b:
            fail("examples %d > batches %d x batch size %d" % (s["examples"], s["batches"], b))
        if s["status"] == "completed" and s["examples"] != s["batches"] * b:
            fail("completed, yet examples %d != batches %d x batch size %d"
                 % (s["examples"], s["batches"], b))
        if s["batches"] > 0 and s["examples"] < s["batches"]:
            fail("examples %d < batches %d" % (s["examples"], s["batches"]))
    if a.rounds is not None and s["rounds"] != a.rounds:
        fail("rounds %d, expected %d" % (s["rounds"], a.rounds))
    if a.round_length is not None and s["rounds"] != s["examples"] // a.round_length:
        fail("rounds %d but examples %d / round length %d = %d" % (
            s["rounds"], s["examples"], a.round_length, s["examples"] // a.round_length))
    if a.loss_halved:
        first, last = s.get("first_round_loss"), s["final_loss"]
        if not is_num(first):
            fail("first_round_loss missing or not a number: %r" % (first,))
        if not (first > 0 and last < first / 2):
            fail("the loss did not halve: first round %.6g, last round %.6g" % (first, last))
        print("loss: first round %.6g, last round %.6g" % (first, last))
    print("summary ok: %s, %d examples, %d rounds" % (s["status"], s["examples"], s["rounds"]))


def check_safetensors(a):
    try:
        with open(a.path, "rb") as f:
            blob = f.read()
    except OSError as e:
        fail("cannot read %s: %s" % (a.path, e))
    if len(blob) < 8:
        fail("file too short (%d bytes)" % len(blob))
    (n,) = struct.unpack("<Q", blob[:8])
    if n > len(blob) - 8:
        fail("header length %d beyond the file (%d bytes)" % (n, len(blob)))
    try:
        header = json.loads(blob[8:8 + n].decode("utf-8"))
    except ValueError as e:
        fail("header is not JSON: %s" % e)
    data = blob[8 + n:]
    header.pop("__metadata__", None)
    widths = [a.inputs] + [int(w) for w in a.hidden.split(",")] + [a.outputs]
    want = {}
    for i in range(len(widths) - 1):
        want["layers.%d.weight" % i] = [widths[i + 1], widths[i]]
        want["layers.%d.bias" % i] = [widths[i + 1]]
    if set(header) != set(want):
        fail("tensors %s, expected %s" % (sorted(header), sorted(want)))
    spans = []
    for name, t in header.items():
        if t.get("dtype") != "F32":
            fail("%s has dtype %r, expected F32" % (name, t.get("dtype")))
        if t.get("shape") != want[name]:
            fail("%s has shape %r, expected %r" % (name, t.get("shape"), want[name]))
        off = t.get("data_offsets")
        if not (isinstance(off, list) and len(off) == 2 and all(is_int(o) for o in off)):
            fail("%s has bad data_offsets %r" % (name, off))
        elems = 1
        for d in t["shape"]:
            elems *= d
        if off[1] - off[0] != 4 * elems:
            fail("%s spans %d bytes, its shape needs %d" % (name, off[1] - off[0], 4 * elems))
        spans.append((off[0], off[1], name))
    spans.sort()
    at = 0
    for begin, end, name in spans:
        if begin != at:
            fail("%s starts at %d, expected %d (offsets not contiguous)" % (name, begin, at))
        at = end
    if at != len(data):
        fail("tensors cover %d bytes, the data section has %d" % (at, len(data)))
    for begin, end, name in spans:
        vals = struct.unpack("<%df" % ((end - begin) // 4), data[begin:end])
        if not all(math.isfinite(v) for v in vals):
            fail("%s holds non-finite values" % name)
        if name.endswith(".weight") and not any(v != 0 for v in vals):
            fail("%s is all zeros" % name)
    try:
        import numpy as np
    except ImportError:
        print("safetensors ok (numpy not importable: checked with struct only)")
        return
    for begin, end, name in spans:
        arr = np.frombuffer(data[begin:end], dtype="<f4").reshape(header[name]["shape"])
        if list(arr.shape) != want[name] or not np.all(np.isfinite(arr)):
            fail("numpy reads %s as %r with non-finite values or a wrong shape" % (name, arr.shape))
    print("safetensors ok (struct and numpy)")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("summary")
    s.add_argument("path")
    s.add_argument("--status")
    s.add_argument("--reason-starts", help="the reason's first words")
    s.add_argument("--rounds", type=int)
    s.add_argument("--round-length", type=int)
    s.add_argument("--batch-size", type=int)
    s.add_argument("--loss-halved", action="store_true")
    w = sub.add_parser("safetensors")
    w.add_argument("path")
    w.add_argument("--inputs", type=int, required=True)
    w.add_argument("--hidden", required=True)
    w.add_argument("--outputs", type=int, required=True)
    a = p.parse_args()
    if a.cmd == "summary":
        check_summary(a)
    else:
        check_safetensors(a)


if __name__ == "__main__":
    main()
