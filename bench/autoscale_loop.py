"""The trainer of `bench.py --only autoscale`: takes RATE examples/s in batches of BATCH through
the Python client, never faster, the rate read from RATE_FILE every second (the bench steps it);
each second it appends a JSON line to STATS: time, rate, examples taken, seconds waited for
data and seconds elapsed since the last line.

    python3 bench/autoscale_loop.py URL RATE_FILE STATS BATCH"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
import stoker  # noqa: E402

url, rate_file, stats, batch = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
with stoker.Client(url, batch_size=batch, stall_timeout=120) as c, open(stats, "a") as out:
    rate = float(open(rate_file).read())
    t = last = time.monotonic()
    waited, taken = 0.0, 0
    while True:
        t0 = time.monotonic()
        with c.next_batch() as b:
            taken += b.count
        waited += time.monotonic() - t0
        t += batch / rate
        now = time.monotonic()
        if t > now:
            time.sleep(t - now)
        t = max(t, time.monotonic() - 0.5)  # a starved trainer does not bank the time it lost
        now = time.monotonic()
        if now - last >= 1.0:
            out.write(json.dumps({"at": now, "rate": rate, "taken": taken, "waited": waited,
                                  "span": now - last}) + "\n")
            out.flush()
            waited, taken, last = 0.0, 0, now
            rate = float(open(rate_file).read())
