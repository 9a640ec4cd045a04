#!/usr/bin/env python3
"""stoker's benchmarks. Each one runs stoker and its baseline side by side in the same run (this
machine is shared and noisy: ratios, not absolute times, are the figures), prints a table with
the target of docs/design.md beside each figure, and writes everything to a JSON file.

    python3 bench/bench.py [--only floor,large,...] [--quick] [--json PATH]

Benchmarks: seed, floor, large, wait, detect, images, images_tv, ranks, epochs, durable, chunks,
group-commit, ranks-shm, autoscale, ragged, floor-var, defaults, buckets, cpu-exec. Run
scripts/build.sh first (or let bench/run.sh do it)."""
import argparse
import datetime
import json
import os
import platform
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
BROKER = os.path.join(BUILD, "server", "stoker-broker")
PRODUCER = os.path.join(BUILD, "producer", "stoker-producer")
TRAINER = os.path.join(BUILD, "trainer", "stoker-trainer")
BENCH_PRODUCER = os.path.join(BUILD, "bench", "stoker-bench-producer")
CONSUMER = os.path.join(BUILD, "bench", "stoker-bench-consumer")
NNG_RAW = os.path.join(BUILD, "bench", "nng-raw")

SYNTH_BYTES = 44  # input float32[10] + output float32[1]


class Procs:
    """Starts processes and makes sure every one of them is gone at the end."""

    def __init__(self):
        self.procs = []

    def start(self, args, **kw):
        p = subprocess.Popen(args, **kw)
        self.procs.append(p)
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=5):
        if p.poll() is None:
            p.send_signal(sig)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(procs, url, *extra):
    p = procs.start([BROKER, "--listen", url, "--log-level", "warn", *extra],
                    stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if line.startswith("metrics"):  # --metrics: its line comes first
        line = p.stdout.readline()
    if not line.startswith("listening"):
        raise RuntimeError(f"broker did not start: {line!r}")
    return p


def endpoint(kind, tmp, name):
    if kind == "ipc":
        return f"ipc://{tmp}/{name}.ipc"
    return f"tcp://127.0.0.1:{free_port()}"


def raw_nng(kind, tmp, producers, msg_bytes, messages):
    """Raw nng PUSH/PULL: `producers` pushers, one puller, messages of msg_bytes."""
    url = endpoint(kind, tmp, "raw")
    per = messages // producers
    with Procs() as procs:
        pull = procs.start([NNG_RAW, "pull", url, str(per * producers)], stdout=subprocess.PIPE,
                           text=True)
        assert pull.stdout.readline().startswith("listening")
        for _ in range(producers):
            procs.start([NNG_RAW, "push", url, str(msg_bytes), str(per)])
        out, _ = pull.communicate(timeout=300)
    return json.loads(out.strip().splitlines()[-1])


def run_trainer(args, timeout, env=None):
    out = subprocess.run([TRAINER, *args, "--json", "-", "--progress", "off", "--log-level",
                          "warn"], stdout=subprocess.PIPE, text=True, timeout=timeout, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1]), out.returncode


# --- benchmarks -----------------------------------------------------------------------------

def bench_seed(opts, tmp):
    """The reference experiment: 16 producers against the inline baseline."""
    scale = 10 if opts.quick else 1
    lo, hi = 0.05 / scale, 0.5 / scale
    delay = f"{lo}:{hi}"
    goal = str(60 / scale)
    ideal = 16 / ((lo + hi) / 2)
    url = endpoint("ipc", tmp, "seed")
    common = ["--batch-size", "4", "--round-length", "20", "--rounds", "100", "--time-goal", goal,
              "--device", "cpu"]
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "12")
        trainer = procs.start([TRAINER, "--broker", url, *common, "--stall-timeout", "10",
                               "--json", "-", "--progress", "off", "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        for i in range(16):
            procs.start([PRODUCER, "--broker", url, "--name", f"p{i}", "--delay", delay,
                         "--seed", str(i + 1), "--log-level", "error"])
        out, _ = trainer.communicate(timeout=200)
        par = json.loads(out.strip().splitlines()[-1])
    inl, _ = run_trainer(["--inline", "--delay", delay, *common], timeout=200)
    return {
        "delay_s": delay, "ideal_examples_per_second": ideal,
        "parallel": par, "inline": inl,
        "fraction_of_ideal": par["examples_per_second"] / ideal,
        "speedup_over_inline": par["examples_per_second"] / inl["examples_per_second"],
        "rows": [
            ("seed: stoker rate / ideal (16 producers)", par["examples_per_second"] / ideal,
             ">= 0.98", par["examples_per_second"] / ideal >= 0.98),
            ("seed: speedup over inline", par["examples_per_second"] / inl["examples_per_second"],
             "(prototype 13.5x)", None),
            ("seed: duplicates + |discrepancy|",
             par["audit"]["duplicates_seen"] + abs(par["audit"]["discrepancy"]), "0",
             par["audit"]["duplicates_seen"] == 0 and par["audit"]["discrepancy"] == 0),
        ],
    }


def bench_floor(opts, tmp):
    """Generation cost zero, 44-byte examples, batch 256, trainer on the CPU doing real steps."""
    total = 1_000_000 if opts.quick else 4_000_000
    res = {"configs": [], "rows": []}
    for kind in ("ipc", "tcp"):
        for producers in (1, 2, 4):
            st = floor_run(tmp, f"floor{producers}", producers, total, kind=kind)
            raw = raw_nng(kind, tmp, producers, 256 * SYNTH_BYTES, total // 256)
            raw_eps = raw["messages_per_second"] * 256
            eps = st["examples_per_second"]
            cfg = {"transport": kind, "producers": producers, "examples_per_second": eps,
                   "mb_per_second": eps * SYNTH_BYTES / 1e6,
                   "raw_examples_per_second": raw_eps, "ratio_to_raw": eps / raw_eps,
                   "overhead_us_per_example": 1e6 / eps, "trainer": st}
            res["configs"].append(cfg)
            target_ok = eps >= 1_000_000
            res["rows"].append((f"floor {kind} P={producers}: examples/s", eps, ">= 1000000",
                                target_ok))
            res["rows"].append((f"floor {kind} P={producers}: ratio to raw nng", eps / raw_eps,
                                "(figure)", None))
            res["rows"].append((f"floor {kind} P={producers}: us per example", 1e6 / eps, "< 1",
                                1e6 / eps < 1))
    return res


def proc_cpu_s(pid):
    """CPU seconds (user + system) a running process has used so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def children_cpu_s():
    """CPU seconds (user + system) of this process's children that have been waited for."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def bench_large(opts, tmp):
    """150,528-byte examples (224x224x3 bytes), batch 32, producers over tcp loopback (as from
    other machines), against raw nng one hop of the same bytes with as many pushers: the consumer
    on the broker's host through shared memory (the default), for 1, 2 and 4 producers; and, with
    one producer, over the socket (STOKER_SHM=0). Generation free on both sides, as the figure is
    about moving bytes: the producers stamp each example's seq (--fill stamp), as nng-raw sends
    messages it never writes; the shm run with every byte written (--fill all) is reported beside
    it, and so is a producer on the broker's host, which pushes by reference (its examples in
    shared memory the broker maps). The others' producers have STOKER_SHM=0: they push bytes, as
    ones on other machines do. Beside each ratio of rates: the CPU seconds all processes of a run
    spent per GB moved, stoker / raw (the machine is shared: CPU per byte moves less than rates)."""
    total = 8000 if opts.quick else 30000
    n_pairs = 3

    def run(shm, fill, local="0", producers=1):
        url = endpoint("tcp", tmp, "large" + shm + fill + local + str(producers))
        cpu0 = children_cpu_s()
        with Procs() as procs:
            start_broker(procs, url, "--queue-depth", "256", "--max-message", "268435456")
            consumer = procs.start([CONSUMER, "--broker", url, "--batch-size", "32",
                                    "--examples", str(total), "--stall-timeout", "10"],
                                   stdout=subprocess.PIPE, text=True,
                                   env={**os.environ, "STOKER_SHM": shm})
            time.sleep(0.3)
            for i in range(producers):
                procs.start([BENCH_PRODUCER, "--broker", url, "--schema",
                             "image:uint8[224,224,3]", "--chunk", "32", "--fill", fill,
                             "--name", f"p{i}"],
                            env={**os.environ, "STOKER_SHM": local})
            out, _ = consumer.communicate(timeout=300)
            # CPU until the consumer had its examples: its own (reaped) and the others' so far
            # (they are stopped after, which is not the run's work).
            cpu = children_cpu_s() - cpu0 + sum(proc_cpu_s(p.pid) for p in procs.procs
                                                if p is not consumer)
        res = json.loads(out.strip().splitlines()[-1])
        res["cpu_s"] = cpu
        res["cpu_s_per_gb"] = res["cpu_s"] / (res["examples"] * 150528 / 1e9)
        return res

    def raw_run(producers):
        cpu0 = children_cpu_s()
        res = raw_nng("tcp", tmp, producers, 32 * 150528, total // 32)
        res["cpu_s"] = children_cpu_s() - cpu0
        # every message sent and received (the first one's time is not in the rate)
        res["cpu_s_per_gb"] = res["cpu_s"] / ((res["messages"] + 1) * 32 * 150528 / 1e9)
        return res

    # For each producer count, n_pairs (stoker shm, raw nng) pairs back to back, the order
    # swapped each time, and the median of their ratios: one pair on this shared machine moves
    # by +-0.1 or more from run to run.
    by_producers = {}
    rows = []
    for producers in (1, 2, 4):
        pairs = []
        for k in range(n_pairs):
            first = run("1", "stamp", producers=producers) if k % 2 == 0 else None
            raw_k = raw_run(producers)
            shm_k = first if first is not None else run("1", "stamp", producers=producers)
            pairs.append((shm_k["bytes_per_second"] / raw_k["bytes_per_second"], shm_k, raw_k))
        ratios = sorted(p[0] for p in pairs)
        ratio = statistics.median(ratios)
        cpu_ratio = statistics.median(p[1]["cpu_s_per_gb"] / p[2]["cpu_s_per_gb"] for p in pairs)
        mid = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
        by_producers[producers] = {
            "ratio": ratio, "pair_ratios": [p[0] for p in pairs], "cpu_ratio": cpu_ratio,
            "stoker": mid[1], "raw": mid[2],
            "stoker_mb_s": [p[1]["bytes_per_second"] / 1e6 for p in pairs],
            "raw_mb_s": [p[2]["bytes_per_second"] / 1e6 for p in pairs]}
        rows += [(f"large P={producers}: stoker shm MB/s (median pair)",
                  mid[1]["bytes_per_second"] / 1e6, "", None),
                 (f"large P={producers}: raw nng MB/s ({producers} pushers)",
                  mid[2]["bytes_per_second"] / 1e6, "", None),
                 (f"large P={producers}: stoker shm / raw nng, median of {n_pairs} pairs", ratio,
                  ">= 0.90", ratio >= 0.90),
                 (f"large P={producers}: CPU s per GB, stoker / raw (median)", cpu_ratio,
                  "(figure)", None)]
    one = by_producers[1]
    raw = one["raw"]
    sock = run("0", "stamp")
    shm_all = run("1", "all")
    local = run("1", "stamp", local="1")
    ratio_local = local["bytes_per_second"] / raw["bytes_per_second"]
    ratio_sock = sock["bytes_per_second"] / raw["bytes_per_second"]
    ratio_all = shm_all["bytes_per_second"] / raw["bytes_per_second"]
    rows += [("large: stoker socket MB/s", sock["bytes_per_second"] / 1e6, "", None),
             ("large: stoker socket / raw nng (P=1)", ratio_sock, "(figure)", None),
             ("large: shm, every byte written / raw (P=1)", ratio_all, "(figure)", None),
             ("large: producer on the broker's host (by reference) / raw", ratio_local,
              "(figure)", None)]
    return {"stoker": one["stoker"], "stoker_socket": sock, "stoker_fill_all": shm_all,
            "raw": raw, "stoker_local_producer": local, "ratio_local_producer": ratio_local,
            "ratio": one["ratio"], "ratio_socket": ratio_sock, "ratio_fill_all": ratio_all,
            "pair_ratios": one["pair_ratios"],
            "by_producers": {str(k): v for k, v in by_producers.items()}, "rows": rows}


def bench_wait(opts, tmp):
    """Data wait when producers keep up, and the rate when they do not."""
    url = endpoint("ipc", tmp, "wait-fast")
    rounds = 20 if opts.quick else 60
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "4096")
        for i in range(2):
            procs.start([PRODUCER, "--broker", url, "--delay", "0:0", "--chunk", "256",
                         "--name", f"fast{i}", "--log-level", "error"])
        time.sleep(0.5)
        # A trainer with real work per step (a 512x512 hidden layer pair on 256-example
        # batches) is the bottleneck here: the supply should never make it wait. OpenBLAS is
        # held to one thread, as a GPU trainer leaves the CPU to the data path: on 2 cores a
        # multi-threaded CPU step would starve the producers instead.
        fast, _ = run_trainer(["--broker", url, "--batch-size", "256", "--round-length", "2560",
                               "--rounds", str(rounds), "--hidden", "512,512", "--device", "cpu"],
                              timeout=300, env={**os.environ, "OPENBLAS_NUM_THREADS": "1"})
    url = endpoint("ipc", tmp, "wait-slow")
    producers, delay = 4, 0.01
    ideal = producers / delay
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "64")
        trainer = procs.start([TRAINER, "--broker", url, "--batch-size", "4", "--round-length",
                               "200", "--rounds", "5" if opts.quick else "15", "--device", "cpu",
                               "--json", "-", "--progress", "off", "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        for i in range(producers):
            procs.start([PRODUCER, "--broker", url, "--delay", f"{delay}:{delay}", "--chunk",
                         "4", "--name", f"slow{i}", "--log-level", "error"])
        out, _ = trainer.communicate(timeout=300)
        slow = json.loads(out.strip().splitlines()[-1])
    frac = slow["examples_per_second"] / ideal
    return {"fast": fast, "slow": slow, "slow_ideal": ideal,
            "rows": [("wait: data wait, producers faster", fast["data_wait_fraction"], "< 0.01",
                      fast["data_wait_fraction"] < 0.01),
                     ("wait: rate / producers' ideal, producers slower", frac, "~1.0",
                      frac >= 0.95)]}


def bench_detect(opts, tmp):
    """SIGKILL a producer mid-run; time until the consumer sees producer_lost. Median of 10."""
    url = endpoint("ipc", tmp, "detect")
    latencies = []
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "64")
        procs.start([PRODUCER, "--broker", url, "--delay", "0.01:0.01", "--name", "steady",
                     "--log-level", "error"])
        consumer = procs.start([CONSUMER, "--broker", url, "--batch-size", "4",
                                "--stall-timeout", "30"], stdout=subprocess.PIPE, text=True)
        for i in range(10):
            victim = procs.start([PRODUCER, "--broker", url, "--delay", "0.005:0.005",
                                  "--name", f"victim{i}", "--log-level", "error"])
            time.sleep(0.5)
            t_kill = time.monotonic()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            while True:
                line = consumer.stdout.readline()
                if not line:
                    raise RuntimeError("consumer ended")
                parts = line.split()
                if parts[:3] == ["event", "producer_lost", f"victim{i}"]:
                    latencies.append(float(parts[3]) - t_kill)
                    break
        procs.stop(consumer, signal.SIGKILL)
    med = statistics.median(latencies)
    return {"latencies_s": latencies, "median_s": med,
            "rows": [("detect: SIGKILL to producer_lost, median of 10 (ms)", med * 1000, "< 100",
                      med < 0.1)]}


def images_rates(opts, tmp, images, n, tag, extra):
    """Examples/s of the images generator through stoker with 1 and 2 producers, and inline
    (stoker-producer --measure: the generator alone on one core, no broker)."""
    rates = {}
    for producers in (1, 2):
        url = endpoint("ipc", tmp, f"img{tag}{producers}")
        with Procs() as procs:
            start_broker(procs, url, "--queue-depth", "256")
            consumer = procs.start([CONSUMER, "--broker", url, "--batch-size", "32",
                                    "--examples", str(n), "--stall-timeout", "20"],
                                   stdout=subprocess.PIPE, text=True)
            time.sleep(0.3)
            for i in range(producers):
                procs.start([PRODUCER, "--broker", url, "--generator", "images", "--images",
                             images, "--size", "64", "--chunk", "16", "--name", f"img{i}",
                             "--seed", str(i + 1), "--log-level", "error", *extra])
            out, _ = consumer.communicate(timeout=600)
            rates[producers] = json.loads(out.strip().splitlines()[-1])["examples_per_second"]
    measure = [PRODUCER, "--generator", "images", "--images", images, "--size", "64", "--chunk",
               "16", "--measure", str(n // 2), "--log-level", "error", *extra]
    out = subprocess.run(measure, check=True, timeout=600, stdout=subprocess.PIPE, text=True)
    inline = json.loads(out.stdout.strip().splitlines()[-1])["examples_per_second"]
    # What the cores make with nothing but generation on them: one generator per core at once,
    # so shared caches and memory bandwidth weigh on it as on the producers above.
    with Procs() as procs:
        gens = [procs.start(measure, stdout=subprocess.PIPE, text=True) for _ in range(2)]
        together = sum(json.loads(g.communicate(timeout=600)[0].strip().splitlines()[-1])
                       ["examples_per_second"] for g in gens)
    return rates, inline, together


def bench_images(opts, tmp):
    """The images generator with real augmentation: 1 and 2 producers against inline.

    The figure is the data-loader workload: 640x480 PNG files decoded for every example
    (--decode each), then cropped, flipped, jittered and normalized to 64x64 float32, so that
    generation, not moving the 49 KB examples, costs the CPU. Decoding once and augmenting
    cached pixels (the default) is also measured: it makes examples faster than two kernel hops
    can carry them on 2 cores, so it shows the transport, not generation."""
    make = os.path.join(ROOT, "bench", "make_images.py")
    loader = os.path.join(tmp, "images-640")
    subprocess.run([sys.executable, make, loader, "4", "4", "640", "480"], check=True)
    cached = os.path.join(tmp, "images")
    subprocess.run([sys.executable, make, cached], check=True)
    cores = min(2, os.cpu_count() or 1)
    n = 2000 if opts.quick else 8000
    rates, inline, together = images_rates(opts, tmp, loader, n, "each", ["--decode", "each"])
    crates, cinline, _ = images_rates(opts, tmp, cached, n * 2, "once", [])
    # The core-limited ideal: two generators alone on the two cores, measured in this run (two
    # times the one-core rate, the earlier definition, is reported beside it).
    ideal = together if cores >= 2 else inline
    return {"inline_examples_per_second": inline, "inline_two_at_once": together, "stoker": rates,
            "cached": {"inline_examples_per_second": cinline, "stoker": crates},
            "rows": [("images: inline (decode each), ex/s", inline, "", None),
                     ("images: 2 generators alone at once, ex/s", together, "", None),
                     ("images: 1 producer / inline", rates[1] / inline, "", None),
                     ("images: 2 producers / inline", rates[2] / inline, "", None),
                     ("images: 2 producers / 2 x inline", rates[2] / (inline * cores), "(figure)",
                      None),
                     ("images: 2 producers / core-limited ideal", rates[2] / ideal, ">= 0.85",
                      rates[2] / ideal >= 0.85),
                     ("images, cached pixels: 2 producers / ideal (transport-bound)",
                      crates[2] / (cinline * cores), "", None)]}


def cpu_seconds(pid):
    """User + system CPU seconds a running process has used so far (NaN once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def floor_run(tmp, tag, producers, total, dataset_items=0, kind="ipc", producer_flags=()):
    """The floor workload (see bench_floor) through a broker over kind (ipc or tcp): a stream, or
    with dataset_items a dataset of that many items for total // dataset_items epochs;
    producer_flags go to every producer (e.g. --retain 0). Returns the trainer's summary."""
    url = endpoint(kind, tmp, tag)
    broker_extra, trainer_extra = [], ["--rounds", str(total // 65536)]
    producer_extra = list(producer_flags)
    if dataset_items:
        epochs = total // dataset_items
        broker_extra = ["--dataset-size", str(dataset_items), "--epochs", str(epochs),
                        "--shard-items", "65536"]
        trainer_extra = ["--epochs", str(epochs)]
        producer_extra += ["--items", str(dataset_items)]
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "65536", "--max-chunk", "65536", *broker_extra)
        trainer = procs.start(
            [TRAINER, "--broker", url, "--batch-size", "256", "--round-length", "65536",
             *trainer_extra, "--device", "cpu", "--prefetch", "8", "--stall-timeout", "10",
             "--json", "-", "--progress", "off", "--log-level", "warn"],
            stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        # Over tcp the producers push bytes, as from other machines; over ipc they are on the
        # broker's host and push by reference (their 180 KB chunks are above the threshold).
        env = {**os.environ, "STOKER_SHM": "0"} if kind == "tcp" else None
        pushers = [procs.start([BENCH_PRODUCER, "--broker", url, "--chunk", "4096",
                                "--name", f"p{i}", *producer_extra], env=env)
                   for i in range(producers)]
        out, _ = trainer.communicate(timeout=300)
        cpu = sum(cpu_seconds(p.pid) for p in pushers)  # before the producers are stopped
    summary = json.loads(out.strip().splitlines()[-1])
    summary["producers_cpu_seconds"] = cpu
    return summary


def stoker_status(url):
    """The broker's /status keys, through the Python package (over the build's libstoker.so)."""
    if os.path.join(ROOT, "python") not in sys.path:
        sys.path.insert(0, os.path.join(ROOT, "python"))
    import stoker
    return stoker.status(url)


def reassign_latency(tmp, i):
    """SIGKILL a producer holding a shard; seconds until the broker handed its items back."""
    url = endpoint("ipc", tmp, f"reassign{i}")
    with Procs() as procs:
        start_broker(procs, url, "--dataset-size", "100000", "--shard-items", "64")
        procs.start([PRODUCER, "--broker", url, "--items", "100000", "--delay", "0.005:0.005",
                     "--name", "steady", "--log-level", "error"])
        victim = procs.start([PRODUCER, "--broker", url, "--items", "100000", "--delay",
                              "0.005:0.005", "--name", "victim", "--log-level", "error"])
        time.sleep(0.5 + 0.037 * i)  # mid-shard: a shard takes 0.32 s
        t_kill = time.monotonic()
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        while True:
            st = stoker_status(url)
            if st["dataset"]["items_reassigned"] > 0:
                return time.monotonic() - t_kill
            if time.monotonic() - t_kill > 10:
                raise RuntimeError("the victim's shard was never handed back")
            time.sleep(0.001)


def bench_epochs(opts, tmp):
    """Datasets: the floor workload as a dataset of N items for E epochs against the stream of
    the same examples, in pairs (one of each back to back, the order swapped every pair; the
    overhead from the median of the pairs' ratios: single floor runs on a shared 2-core machine
    spread by +-15 %, more than the effect measured); and the time from a producer's SIGKILL to
    its shard's items being handed back, median of 5."""
    total = 1_048_576 if opts.quick else 4_194_304
    items = total // 8
    pairs = 3 if opts.quick else 9
    stream, dataset, ratios = [], [], []
    for k in range(pairs):
        got = {}
        for kind in (("s", "d") if k % 2 == 0 else ("d", "s")):
            run = floor_run(tmp, f"e{kind}{k}", 2, total, items if kind == "d" else 0)
            got[kind] = run["examples_per_second"]
        stream.append(got["s"])
        dataset.append(got["d"])
        ratios.append(got["d"] / got["s"])
    s, d = statistics.median(stream), statistics.median(dataset)
    overhead = 1 - statistics.median(ratios)
    latencies = [reassign_latency(tmp, i) for i in range(5)]
    med = statistics.median(latencies)
    return {"stream_examples_per_second": stream, "dataset_examples_per_second": dataset,
            "ratios": ratios, "items": items, "epochs": total // items, "overhead": overhead,
            "reassign_latencies_s": latencies,
            "rows": [
                ("epochs: floor stream, ex/s (median)", s, "(figure)", None),
                ("epochs: floor dataset, 8 epochs, ex/s (median)", d, "(figure)", None),
                (f"epochs: dataset overhead vs stream, median of {pairs} pairs (%)",
                 overhead * 100, "< 5", overhead < 0.05),
                ("epochs: SIGKILL to shard handed back, median (ms)", med * 1000, "(figure)",
                 None),
            ]}


def bench_images_tv(opts, tmp):
    """The images generator against torchvision + PIL on the same PNG and JPEG folder:
    per core and end to end into the same loop, float32 and uint8, default and rich pipelines
    (bench/images_tv.py; it needs Debian's python3-torchvision and python3-pil)."""
    out = os.path.join(tmp, "images_tv.json")
    size = ["--files", "32", "--examples", "200", "--batches", "12"] if opts.quick else \
        ["--files", "64", "--examples", "400", "--batches", "24"]
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "images_tv.py"), "--json",
                    out, *size], check=True, timeout=1800)
    with open(out) as f:
        runs = json.load(f)
    rows = []
    for r in runs:
        tag = f"images vs torchvision, {r['format']} {r['pipeline']} {r['output']}"
        core = r["per_core"]["stoker"] / r["per_core"]["torchvision"]
        e2e = r["end_to_end"]["stoker"] / r["end_to_end"]["torchvision"]
        want = 1.5 if r["format"] == "png" else 2.5
        rows.append((f"{tag}: per core", core, "", None))
        rows.append((f"{tag}: end to end", e2e, f">= {want}" if r["pipeline"] == "rich" else "",
                     e2e >= want if r["pipeline"] == "rich" else None))
        rows.append((f"{tag}: bytes per example", r["bytes_per_example"], "", None))
    return {"runs": runs, "rows": rows}


def bench_images_dataset(opts, tmp):
    """A dataset of 60,000 PNGs of 28x28 (Fashion-MNIST's shape) from a cold start: 2 images
    --dataset producers against ImageFolder + DataLoader(num_workers=2), the same augmentation
    and loop, one epoch each (bench/images_dataset.py; it needs Debian's python3-torchvision)."""
    out = os.path.join(tmp, "images_dataset.json")
    size = ["--files", "20000", "--rounds", "1"] if opts.quick else ["--rounds", "3"]
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "images_dataset.py"),
                    "--json", out, *size], check=True, timeout=1800)
    with open(out) as f:
        r = json.load(f)
    first = r["first_batch_s"]
    return {"runs": r, "rows": [
        (f"images dataset ({r['files']} PNGs): first batch, stoker s", first["stoker"], "<= 1",
         first["stoker"] <= 1.0),
        (f"images dataset ({r['files']} PNGs): first batch, torchvision s", first["torchvision"],
         "", None),
        (f"images dataset ({r['files']} PNGs): images/s stoker / torchvision", r["ratio"], ">= 1",
         r["ratio"] >= 1.0)]}


def ranks_run(tmp, world, grouped, per_rank):
    """world stoker-trainers on the floor workload, each training per_rank examples (a multiple
    of 16384): as one group fed by a supply of exactly world x per_rank examples (they stop at
    its end), or as independent trainers that each stop after per_rank examples (--rounds).
    Either way the run lasts until the slowest trainer is done, as data-parallel ranks do.
    Returns the aggregate rate, the steps per rank and when each trainer exited (s after the
    producer started)."""
    total = world * per_rank
    url = endpoint("ipc", tmp, f"ranks{world}{'g' if grouped else 'u'}")
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "65536", "--max-chunk", "65536", "--schema",
                     "input:float32[10],output:float32[1]")
        trainers = []
        for r in range(world):
            group = (["--group", "bench", "--rank", str(r), "--world", str(world), "--rounds",
                      "100000"] if grouped else ["--rounds", str(per_rank // 16384)])
            trainers.append(procs.start(
                [TRAINER, "--broker", url, "--batch-size", "256", "--round-length", "16384",
                 "--device", "cpu", "--prefetch", "8", "--stall-timeout",
                 "20", "--json", "-", "--progress", "off", "--log-level", "warn", *group],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        time.sleep(1)  # every trainer connected: none misses the start
        t0 = time.monotonic()
        procs.start([BENCH_PRODUCER, "--broker", url, "--chunk", "4096", "--max-examples",
                     str(total), "--name", "p0"])
        ends, outs = [None] * world, [None] * world
        while None in ends:
            for i, t in enumerate(trainers):
                if ends[i] is None and t.poll() is not None:
                    ends[i] = time.monotonic() - t0
                    outs[i] = json.loads(t.stdout.read().strip().splitlines()[-1])
            if time.monotonic() - t0 > 300:
                raise RuntimeError("ranks: a trainer did not finish within 300 s")
            time.sleep(0.002)
    examples = sum(o["examples"] for o in outs)
    return {"world": world, "grouped": grouped, "examples": examples,
            "examples_per_second": examples / max(ends), "steps": [o["batches"] for o in outs],
            "exit_s": ends, "end_spread_s": max(ends) - min(ends),
            "status": [o["status"] for o in outs]}


def bench_ranks(opts, tmp):
    """1, 2 and 4 trainers on the floor workload (batch 256, real CPU steps) fed as one group
    against the same number of ungrouped trainers doing the same work each: the cost of
    grouping (target < 5 %), equal steps, and how long the fastest rank waits for the last one
    at the end."""
    per_rank = 16384 * (32 if opts.quick else 128)
    res = {"configs": [], "rows": []}
    for world in (1, 2, 4):
        best = {}
        for _ in range(3):  # alternate, keep each side's best: the machine is shared and noisy
            for grouped in (False, True):
                r = ranks_run(tmp, world, grouped, per_rank)
                res["configs"].append(r)
                if grouped not in best or (r["examples_per_second"]
                                           > best[grouped]["examples_per_second"]):
                    best[grouped] = r
        g, u = best[True], best[False]
        cost = 1 - g["examples_per_second"] / u["examples_per_second"]
        # Per step of one rank: the same examples per step, so the time per step is world x batch
        # over the aggregate rate.
        step_us = lambda r: 1e6 * 256 * world / r["examples_per_second"]  # noqa: E731
        res["rows"].append((f"ranks W={world}: grouped / ungrouped examples/s",
                            g["examples_per_second"] / u["examples_per_second"], ">= 0.95",
                            cost < 0.05))
        res["rows"].append((f"ranks W={world}: per-step overhead of grouping, us",
                            step_us(g) - step_us(u), "(figure)", None))
        res["rows"].append((f"ranks W={world}: equal steps per rank (grouped)",
                            float(len(set(g["steps"])) == 1), "1", len(set(g["steps"])) == 1))
        res["rows"].append((f"ranks W={world}: end spread grouped / ungrouped, ms",
                            1000 * g["end_spread_s"], f"({1000 * u['end_spread_s']:.0f} ms)",
                            None))
    return res


def seed_rate(tmp, tag, scale, retain, producer_flags=()):
    """Examples/s of the seed workload (16 synthetic producers, delays divided by scale)."""
    lo, hi = 0.05 / scale, 0.5 / scale
    url = endpoint("ipc", tmp, f"durable-seed-{tag}")
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "12")
        trainer = procs.start([TRAINER, "--broker", url, "--batch-size", "4", "--round-length",
                               "20", "--rounds", "100", "--time-goal", str(60 / scale),
                               "--device", "cpu", "--stall-timeout", "10", "--json", "-",
                               "--progress", "off", "--log-level", "warn"],
                              stdout=subprocess.PIPE, text=True)
        time.sleep(1)
        for i in range(16):
            procs.start([PRODUCER, "--broker", url, "--name", f"p{i}", "--delay", f"{lo}:{hi}",
                         "--seed", str(i + 1), "--log-level", "error",
                         *([] if retain else ["--retain", "0"]), *producer_flags])
        out, _ = trainer.communicate(timeout=200)
    return json.loads(out.strip().splitlines()[-1])["examples_per_second"]


PY = "/usr/bin/python3"
CHUNKS_LOOP = os.path.join(ROOT, "bench", "chunks_loop.py")


def has_torch():
    return subprocess.run([PY, "-c", "import torch"], capture_output=True).returncode == 0


def chunks_stoker(tmp, tag, producer_flags, seconds, producers=2):
    """examples/s into a batch-256 Python loop (stoker.Client) from `producers` synthetic
    producers with --delay 0:0 and producer_flags, every other setting the default."""
    url = endpoint("ipc", tmp, f"chunks-{tag}")
    with Procs() as procs:
        start_broker(procs, url)
        for i in range(producers):
            procs.start([PRODUCER, "--broker", url, "--name", f"{tag}{i}", "--delay", "0:0",
                         "--log-level", "error", *producer_flags])
        out = subprocess.run([PY, CHUNKS_LOOP, "stoker", url, str(seconds)],
                             stdout=subprocess.PIPE, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_chunks(opts, tmp):
    """Chunks sized by bytes and time, in one run: synthetic producers with
    --delay 0:0 into a batch-256 Python loop with the old default (--chunk 3), the sized default
    and --chunk 1024, against a PyTorch DataLoader(num_workers=2) generating the same examples
    in Python when torch is installed; and the reference experiment's rate / ideal (16
    producers, delay 0.05:0.5 s) with the old default and the sized one."""
    seconds = 3 if opts.quick else 8
    res = {"configs": {}, "rows": []}
    for tag, flags in (("chunk3", ["--chunk", "3"]), ("auto", []),
                       ("chunk1024", ["--chunk", "1024"])):
        res["configs"][tag] = chunks_stoker(tmp, tag, flags, seconds)
    base = res["configs"]["chunk3"]["examples_per_second"]
    for tag, label in (("chunk3", "--chunk 3 (old default)"), ("auto", "defaults (sized)"),
                       ("chunk1024", "--chunk 1024")):
        c = res["configs"][tag]
        res["rows"].append((f"chunks: {label}: examples/s", c["examples_per_second"], "(figure)",
                            None))
        res["rows"].append((f"chunks: {label}: examples per push", c["examples_per_push"],
                            "(figure)", None))
    auto = res["configs"]["auto"]["examples_per_second"]
    res["rows"].append(("chunks: defaults (sized) / --chunk 3", auto / base, "(figure)", None))
    res["rows"].append(("chunks: defaults (sized) / --chunk 1024",
                        auto / res["configs"]["chunk1024"]["examples_per_second"], ">= 0.8",
                        auto >= 0.8 * res["configs"]["chunk1024"]["examples_per_second"]))
    if has_torch():
        out = subprocess.run([PY, CHUNKS_LOOP, "dataloader", "2", str(seconds)],
                             stdout=subprocess.PIPE, text=True, timeout=120)
        dl = json.loads(out.stdout.strip().splitlines()[-1])["examples_per_second"]
        res["configs"]["dataloader2"] = {"examples_per_second": dl}
        res["rows"].append(("chunks: DataLoader(num_workers=2): examples/s", dl, "(figure)",
                            None))
        res["rows"].append(("chunks: --chunk 3 (old default) / DataLoader", base / dl, "(figure)",
                            None))
        res["rows"].append(("chunks: defaults (sized) / DataLoader", auto / dl, ">= 1", auto >= dl))
    else:
        res["rows"].append(("chunks: DataLoader: torch not installed", float("nan"), "", None))
    scale = 10 if opts.quick else 1
    ideal = 16 / ((0.05 + 0.5) / 2 / scale)
    for tag, flags in (("seed_chunk3", ["--chunk", "3"]), ("seed_auto", [])):
        rate = seed_rate(tmp, tag, scale, True, flags)
        res["configs"][tag] = {"examples_per_second": rate, "fraction_of_ideal": rate / ideal}
    for tag, label in (("seed_chunk3", "--chunk 3 (old default)"),
                       ("seed_auto", "defaults (sized)")):
        frac = res["configs"][tag]["fraction_of_ideal"]
        res["rows"].append((f"chunks: seed rate / ideal, {label}", frac, ">= 0.98", frac >= 0.98))
    return res


def defaults_run(tmp, tag, size, tuned, seconds):
    """One side of bench_defaults: examples/s into stoker.Client's loop (chunks_loop.py) from 2
    producers and a broker on this host. size "large": 150,528-byte images, batch 32, generation
    free (stoker-bench-producer --fill stamp); "small": the synthetic 44-byte examples with
    --delay 0:0, batch 256. tuned: what a user who measured would set (large: --chunk 32, the
    broker --queue-depth 256 --max-message 256 MiB, as python_bench.py --large; small: --chunk
    1024), else every default of the producers, the broker and the Client."""
    url = endpoint("ipc", tmp, f"defaults-{tag}")
    if size == "large":
        broker = ["--queue-depth", "256", "--max-message", "268435456"] if tuned else []
        producer = [BENCH_PRODUCER, "--schema", "image:uint8[224,224,3]", "--fill", "stamp",
                    *(["--chunk", "32"] if tuned else [])]
        loop = ["32", "image"]
    else:
        broker = []
        producer = [PRODUCER, "--delay", "0:0", "--log-level", "error",
                    *(["--chunk", "1024"] if tuned else [])]
        loop = ["256", "input"]
    with Procs() as procs:
        start_broker(procs, url, *broker)
        for i in range(2):
            procs.start([*producer, "--broker", url, "--name", f"{tag}{i}"])
        out = subprocess.run([PY, CHUNKS_LOOP, "stoker", url, str(seconds), *loop],
                             stdout=subprocess.PIPE, text=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_defaults(opts, tmp):
    """Every default against tuned, in one run: 150 KB examples (224x224x3 bytes, batch 32, 2
    producers, generation free) and 44-byte ones (batch 256, 2 synthetic producers with --delay
    0:0), each as the rate with every default (producers, broker, stoker.Client) over the rate
    tuned (defaults_run), median of n_pairs pairs run back to back, the order swapped each time
    (this machine is shared)."""
    seconds = 3 if opts.quick else 6
    n_pairs = 3
    res = {"rows": []}
    for size, label, bytes_each in (("large", "150 KB examples, batch 32", 150528),
                                    ("small", "44-byte examples, batch 256", SYNTH_BYTES)):
        pairs = []
        for k in range(n_pairs):
            runs = {}
            for tuned in ((False, True) if k % 2 == 0 else (True, False)):
                runs[tuned] = defaults_run(tmp, f"{size}{k}{int(tuned)}", size, tuned, seconds)
            pairs.append((runs[False]["examples_per_second"] / runs[True]["examples_per_second"],
                          runs[False], runs[True]))
        ratio = statistics.median(p[0] for p in pairs)
        mid = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
        res[size] = {"ratio": ratio, "pair_ratios": [p[0] for p in pairs],
                     "defaults": mid[1], "tuned": mid[2]}
        unit, scale = ("MB/s", bytes_each / 1e6) if size == "large" else ("examples/s", 1)
        res["rows"] += [
            (f"defaults: {label}: every default, {unit}",
             mid[1]["examples_per_second"] * scale, "(figure)", None),
            (f"defaults: {label}: tuned, {unit}", mid[2]["examples_per_second"] * scale,
             "(figure)", None),
            (f"defaults: {label}: examples per push, default / tuned",
             mid[1]["examples_per_push"], f"{mid[2]['examples_per_push']:.0f}", None),
            (f"defaults: {label}: every default / tuned, median of {n_pairs}", ratio,
             ">= 0.9", ratio >= 0.9)]
    return res


def bench_tokens(opts, tmp):
    """The tokens generator alone: windows of 1024 tokens drawn from a 64 Mi-token
    llm.c shard (128 MiB, in the page cache) by `stoker-producer --generator tokens --measure`,
    one process, one core, as int32 and as uint16 (a plain copy); beside it, in the same run,
    numpy converting the whole shard's uint16 tokens to int32 in one call, the memory speed the
    generator should come near."""
    import numpy as np
    n_tokens = (1 << 22) if opts.quick else (1 << 26)
    shard = os.path.join(tmp, "tokens.bin")
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = 20240520, 1, n_tokens
    toks = (np.arange(n_tokens, dtype=np.uint64) * 2654435761 % 50257).astype("<u2")
    with open(shard, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
    window = 1024
    windows = 20000 if opts.quick else 200000
    res = {"configs": {}, "rows": []}
    rates = {}
    for dtype in ("int32", "uint16"):
        best = 0.0
        for _ in range(3):
            out = subprocess.run([PRODUCER, "--generator", "tokens", "--tokens", shard,
                                  "--window", str(window), "--token-dtype", dtype,
                                  "--measure", str(windows), "--log-level", "error"],
                                 stdout=subprocess.PIPE, text=True, timeout=300, check=True)
            best = max(best, json.loads(out.stdout)["examples_per_second"] * window)
        rates[dtype] = best
        res["configs"][dtype] = {"tokens_per_second": best}
    numpy_best = 0.0
    for _ in range(3):
        t0 = time.perf_counter()
        toks.astype(np.int32)
        numpy_best = max(numpy_best, n_tokens / (time.perf_counter() - t0))
    res["configs"]["numpy_astype_int32"] = {"tokens_per_second": numpy_best}
    res["rows"].append(("tokens: generator int32, tokens/s per core", rates["int32"], "(figure)",
                        None))
    res["rows"].append(("tokens: generator uint16, tokens/s per core", rates["uint16"],
                        "(figure)", None))
    res["rows"].append(("tokens: numpy uint16->int32 of the shard, tokens/s", numpy_best,
                        "(figure)", None))
    res["rows"].append(("tokens: generator int32 / numpy conversion", rates["int32"] / numpy_best,
                        ">= 0.8", rates["int32"] >= 0.8 * numpy_best))
    return res


RAGGED_LOOP = os.path.join(ROOT, "bench", "ragged_loop.py")


def ragged_loop(args):
    out = subprocess.run([PY, RAGGED_LOOP, *args], stdout=subprocess.PIPE, text=True,
                         timeout=180)
    if out.returncode != 0:
        raise RuntimeError(f"ragged_loop.py {' '.join(args)} exited {out.returncode}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def ragged_config():
    """ragged_loop.py's batching modes (its MODES list, in order) and the producers' --lengths
    that draw its sequences."""
    out = subprocess.run([PY, "-c", "import ragged_loop as r; print(r.LENGTHS, *(m[0] for m in "
                          "r.MODES))"], stdout=subprocess.PIPE, text=True,
                         cwd=os.path.join(ROOT, "bench"), check=True)
    lengths, *modes = out.stdout.split()
    return modes, lengths


def ragged_stoker(tmp, tag, mode, seconds, lengths):
    """ragged_loop.py's stoker side: a broker with its defaults and 2 synthetic producers of
    the tokens workload (log-normal lengths, mean 512, cap 4096; --delay 0:0, the workload's
    default) on this host, the loop pulling through shared memory as the default Client does."""
    url = endpoint("ipc", tmp, f"ragged-{tag}")
    with Procs() as procs:
        start_broker(procs, url)
        for i in range(2):
            procs.start([PRODUCER, "--broker", url, "--name", f"{tag}{i}", "--workload", "tokens",
                         "--lengths", lengths, "--vocab", "50257", "--log-level", "error"])
        return ragged_loop(["stoker", url, str(seconds), mode])


def bench_ragged(opts, tmp):
    """Token sequences of log-normal lengths (mean 512, cap 4096) into a PyTorch loop that gets
    each batch of 32 as a padded tensor: stoker (2 synthetic producers, --workload
    tokens) against DataLoader(num_workers=2) over an IterableDataset drawing the same sequences
    with numpy and a padding collate (bench/ragged_loop.py says how both sides' per-example
    cost compare). Real tokens/s (padding not counted), their ratio, and each batching mode's
    padding fraction (padded slots / slots after padding to the batch's longest). Pairs back to
    back, the order swapped every pair; the median of the pairs' ratios. Modes the Client does
    not take yet (buckets=, pack=) say so."""
    seconds = 3 if opts.quick else 8
    pairs = 1 if opts.quick else 3  # odd: one starved run (this machine is shared) is not half
    res = {"configs": {"dataloader": [], "modes": {}}, "rows": []}
    if not has_torch():
        res["rows"].append(("ragged: torch not importable by " + PY, float("nan"), "", None))
        return res
    modes, lengths = ragged_config()
    ratios = []
    for k in range(pairs):
        order = ("stoker", "dataloader") if k % 2 == 0 else ("dataloader", "stoker")
        got = {}
        for side in order:
            if side == "dataloader":
                got[side] = ragged_loop(["dataloader", "2", str(seconds)])
                res["configs"]["dataloader"].append(got[side])
                continue
            for mode in modes:
                r = ragged_stoker(tmp, f"{mode}{k}", mode, seconds, lengths)
                res["configs"]["modes"].setdefault(mode, []).append(r)
                got[mode] = r
        ratios.append(got["count"]["tokens_per_second"] / got["dataloader"]["tokens_per_second"])
    res["configs"]["ratios"] = ratios
    med = lambda rs, key: statistics.median(r[key] for r in rs)  # noqa: E731
    dl = res["configs"]["dataloader"]
    res["rows"].append(("ragged: DataLoader(num_workers=2) tokens/s", med(dl, "tokens_per_second"),
                        "(figure)", None))
    res["rows"].append(("ragged: DataLoader padding fraction", med(dl, "padding_fraction"),
                        "(figure)", None))
    for mode in modes:
        rs = res["configs"]["modes"][mode]
        if "skipped" in rs[0]:
            print(f"bench: ragged {mode}: skipped: {rs[0]['skipped']}", file=sys.stderr)
            res["rows"].append((f"ragged: {mode}: skipped ({rs[0]['skipped']})", float("nan"),
                                "", None))
            continue
        res["rows"].append((f"ragged: stoker {mode}: tokens/s", med(rs, "tokens_per_second"),
                            "(figure)", None))
        pad = med(rs, "padding_fraction")
        target, ok = "(figure)", None
        if mode == "buckets":
            target, ok = "<= 0.05", pad <= 0.05
        elif mode == "packed":
            target, ok = "0", pad == 0
        res["rows"].append((f"ragged: stoker {mode}: padding fraction", pad, target, ok))
        if mode != "count":
            res["rows"].append((f"ragged: stoker {mode}: tokens/s / count's",
                                med(rs, "tokens_per_second") /
                                med(res["configs"]["modes"]["count"], "tokens_per_second"),
                                "(figure)", None))
    ratio = statistics.median(ratios)
    res["rows"].append((f"ragged: stoker count / DataLoader tokens/s, median of {pairs}", ratio,
                        ">= 2", ratio >= 2))
    return res


BUCKETS_LOOP = os.path.join(ROOT, "bench", "buckets_loop.py")
BUCKETS_LENGTHS = "lognormal:200:2048"  # mean 200 (median 121), sigma 1, cut to 2048
# Producers: slower than the consumer (2, 2 ms each per sequence: 1,000 sequences/s, the
# queues nearly empty when a batch is asked for) and free (1, --delay 0:0).
BUCKETS_SUPPLY = [("slow", 2, "0.002:0.002"), ("free", 1, "0:0")]
# (name, batch_size, max_tokens, buckets); "count" is what the others' tokens/s are compared to.
BUCKETS_MODES = [("count", 32, 0, 0), ("buckets", 32, 0, 1), ("max_tokens", 0, 16384, 0),
                 ("max_tokens+buckets", 0, 16384, 1)]


def buckets_run(tmp, tag, broker, supply, mode, warmup, seconds):
    _, producers, delay = supply
    _, batch_size, max_tokens, buckets = mode
    url = endpoint("ipc", tmp, f"buckets-{tag}")
    with Procs() as procs:
        p = procs.start([broker, "--listen", url, "--log-level", "warn"], stdout=subprocess.PIPE,
                        text=True)
        if not p.stdout.readline().startswith("listening"):
            raise RuntimeError(f"broker {broker} did not start")
        for i in range(producers):
            procs.start([PRODUCER, "--broker", url, "--name", f"{tag}{i}", "--workload", "tokens",
                         "--lengths", BUCKETS_LENGTHS, "--vocab", "50257", "--delay", delay,
                         "--log-level", "error"])
        out = subprocess.run([PY, BUCKETS_LOOP, url, str(warmup), str(seconds), str(batch_size),
                              str(max_tokens), str(buckets)], stdout=subprocess.PIPE, text=True,
                             timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"buckets_loop.py exited {out.returncode}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def bench_buckets(opts, tmp):
    """Length buckets where users run them: token sequences of log-normal lengths (mean 200, cap
    2048) from producers slower than the consumer and from a free one, pulled by count (batch
    32), with buckets (batch 32), by a token budget (max_tokens=16384) and by the budget with
    buckets; each batch padded to its longest in the loop (bench/buckets_loop.py). Per supply
    and mode: the padding fraction, tokens/s against count batching's in the same round, and the
    first batch's delay (the reserve's cost). Rounds back to back, the modes' order rotated; the
    medians. STOKER_BENCH_BROKER_BEFORE=PATH runs a second broker (e.g. one built before a
    change) in the same rounds, its figures beside."""
    warmup, seconds = (2, 3) if opts.quick else (3, 8)
    rounds = 1 if opts.quick else 3
    brokers = [("", BROKER)]
    before = os.environ.get("STOKER_BENCH_BROKER_BEFORE")
    if before:
        brokers.append(("before ", before))
    res = {"configs": {"lengths": BUCKETS_LENGTHS, "runs": []}, "rows": []}
    got = {}
    for k in range(rounds):
        for supply in BUCKETS_SUPPLY:
            order = BUCKETS_MODES[k % len(BUCKETS_MODES):] + BUCKETS_MODES[:k % len(BUCKETS_MODES)]
            for mode in order:
                for label, broker in brokers:
                    r = buckets_run(tmp, f"{supply[0]}{mode[1]}{mode[2]}{mode[3]}{k}{len(label)}",
                                    broker, supply, mode, warmup, seconds)
                    r.update({"round": k, "supply": supply[0], "mode": mode[0],
                              "broker": label.strip() or "this"})
                    res["configs"]["runs"].append(r)
                    got.setdefault((label, supply[0], mode[0]), []).append(r)
    for label, _ in brokers:
        for supply in BUCKETS_SUPPLY:
            count = got[(label, supply[0], "count")]
            for mode in BUCKETS_MODES:
                rs = got[(label, supply[0], mode[0])]
                name = f"buckets: {label}{supply[0]} {mode[0]}"
                pad = statistics.median(r["padding_fraction"] for r in rs)
                target, ok = "(figure)", None
                if mode[3] and not label:
                    target, ok = "<= 0.10", pad <= 0.10
                res["rows"].append((f"{name}: padding fraction", pad, target, ok))
                if mode[0] != "count":
                    ratio = statistics.median(r["tokens_per_second"] / c["tokens_per_second"]
                                              for r, c in zip(rs, count))
                    target, ok = "(figure)", None
                    if mode[3] and not label:
                        target, ok = ">= 0.95", ratio >= 0.95
                    res["rows"].append((f"{name}: tokens/s / count's", ratio, target, ok))
                else:
                    res["rows"].append((f"{name}: tokens/s", statistics.median(
                        r["tokens_per_second"] for r in rs), "(figure)", None))
                res["rows"].append((f"{name}: first batch, s", statistics.median(
                    r["first_batch_s"] for r in rs), "(figure)", None))
    return res


CPU_CHILD = os.path.join(ROOT, "bench", "cpu_child.py")
CPU_LOOP = os.path.join(ROOT, "bench", "cpu_loop.py")
CPU_SCHEMA = "image:float32[3,32,32],label:int64"
CPU_RECORD = 3 * 32 * 32 * 4 + 8
CPU_ROUNDS = 200  # the child's matmul rounds per example: about 2 ms of one core here


def cpu_ticks(pid):
    """CPU time (user + system, clock ticks) of pid and every process below it; 0 when gone."""
    total = 0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                total += sum(cpu_ticks(int(c)) for c in f.read().split())
    except (OSError, ValueError, IndexError):
        pass
    return total


def cpu_child_cmd():
    # One thread each (a BLAS that spreads a matmul over both cores would not be CPU-bound
    # producers on 2 cores); exec, so that the producer's child is the generator itself.
    return (f"exec env OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 {PY} {CPU_CHILD} "
            f"{CPU_ROUNDS}")


def cpu_ideal(count):
    """The core-limited ideal: two children alone, side by side, their output to /dev/null,
    each one's rate as it says (start-up not counted); and their CPU ms per example, start-up
    included."""
    procs = [subprocess.Popen(["sh", "-c", cpu_child_cmd() + f" {count} > /dev/null"],
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    rate, cpu_s = 0.0, 0.0
    try:
        for p in procs:
            line = p.stderr.read().strip().splitlines()
            _, _, ru = os.wait4(p.pid, 0)
            p.returncode = 0
            cpu_s += ru.ru_utime + ru.ru_stime
            n, _, _, secs, _ = line[-1].split()
            rate += int(n) / float(secs)
    finally:
        for p in procs:
            if p.returncode is None:
                p.kill()
                p.wait()
    return rate, cpu_s / (2 * count) * 1000


def cpu_stoker(tmp, tag, producer, warmup, seconds, batch):
    """examples/s of cpu_loop.py over 2 exec producers of cpu_child.py, and each process's CPU
    seconds per example over the measurement."""
    url = endpoint("ipc", tmp, f"cpu-{tag}")
    with Procs() as procs:
        broker = start_broker(procs, url)
        prods = [procs.start([producer, "--broker", url, "--name", f"{tag}{i}", "--generator",
                              "exec", "--exec", cpu_child_cmd(), "--schema", CPU_SCHEMA,
                              "--format", "raw", "--log-level", "error"]) for i in range(2)]
        loop = procs.start([PY, CPU_LOOP, url, str(warmup), str(seconds), str(batch)],
                           stdout=subprocess.PIPE, text=True)

        def sample():
            prod = sum(cpu_ticks(p.pid) for p in prods)
            child = prod - sum(cpu_ticks_self(p.pid) for p in prods)
            return {"broker": cpu_ticks(broker.pid), "producer": prod - child, "child": child,
                    "consumer": cpu_ticks(loop.pid)}

        line = loop.stdout.readline()
        if line.strip() != "measuring":
            raise RuntimeError(f"cpu_loop.py: {line!r}")
        before = sample()
        line = loop.stdout.readline()
        after = sample()
        loop.wait(30)
        if loop.returncode != 0 or not line:
            raise RuntimeError(f"cpu_loop.py exited {loop.returncode}")
        r = json.loads(line)
    hz = os.sysconf("SC_CLK_TCK")
    r["cpu_ms_per_example"] = {k: (after[k] - before[k]) / hz * 1000 / r["examples"]
                               for k in after}
    return r


def cpu_ticks_self(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, ValueError, IndexError):
        return 0


def bench_cpu_exec(opts, tmp):
    """CPU-bound exec producers: 2 stoker-producer --generator exec, each running
    bench/cpu_child.py (about 2 ms of numpy per example, raw records written and flushed one
    by one), on this 2-core machine, into a Python loop (bench/cpu_loop.py, batch 64), against
    the core-limited ideal: the same two children alone, side by side, in the same round. Each
    process's CPU ms per example (the children's, the producers' own, the broker's, the
    loop's) says where the rest goes. STOKER_BENCH_PRODUCER_BEFORE=PATH runs a second
    producer binary (one built before a change) in the same rounds."""
    warmup, seconds = (2, 3) if opts.quick else (3, 8)
    rounds = 1 if opts.quick else 3
    count = 300 if opts.quick else 1000
    producers = [("", PRODUCER)]
    before = os.environ.get("STOKER_BENCH_PRODUCER_BEFORE")
    if before:
        producers.append(("before ", before))
    res = {"configs": {"rounds": []}, "rows": []}
    ratios = {label: [] for label, _ in producers}
    for k in range(rounds):
        rnd = {}
        rnd["ideal"], rnd["child_ms_alone"] = cpu_ideal(count)
        order = producers if k % 2 == 0 else producers[::-1]
        for label, producer in order:
            r = cpu_stoker(tmp, f"c{k}{len(label)}", producer, warmup, seconds, 64)
            rnd[label.strip() or "this"] = r
            ratios[label].append(r["examples_per_second"] / rnd["ideal"])
        res["configs"]["rounds"].append(rnd)
    rs = res["configs"]["rounds"]
    res["rows"].append(("cpu-exec: ideal (2 children alone), examples/s",
                        statistics.median(r["ideal"] for r in rs), "(figure)", None))
    res["rows"].append(("cpu-exec: a child alone, CPU ms per example (with its start)",
                        statistics.median(r["child_ms_alone"] for r in rs), "(figure)", None))
    for label, _ in producers:
        key = label.strip() or "this"
        ratio = statistics.median(ratios[label])
        res["rows"].append((f"cpu-exec: {label}stoker / ideal, median of {rounds}", ratio,
                            ">= 0.85" if not label else "(figure)",
                            ratio >= 0.85 if not label else None))
        for proc in ("child", "producer", "broker", "consumer"):
            ms = statistics.median(r[key]["cpu_ms_per_example"][proc] for r in rs)
            res["rows"].append((f"cpu-exec: {label}CPU ms per example, {proc}", ms, "(figure)",
                                None))
        # Where the two cores went: the children's share of all our processes' CPU. On a
        # machine nobody else uses, stoker / ideal comes to about this.
        share = statistics.median(
            r[key]["cpu_ms_per_example"]["child"] / sum(r[key]["cpu_ms_per_example"].values())
            for r in rs)
        res["rows"].append((f"cpu-exec: {label}children's share of the CPU", share, "(figure)",
                            None))
    return res


def floor_var_run(tmp, tag, schema, rows, total, kind):
    """examples/s of the C consumer (stoker-bench-consumer: pull and acknowledge, nothing else)
    over 2 stoker-bench-producers of schema (a variable field's values rows long), batch 256,
    chunks of 4096. kind "ipc": producers on the broker's host as they come (fixed-only chunks
    pushed by reference; variable-length ones go as bytes, the producer client's rule today);
    "tcp": producers push bytes (STOKER_SHM=0), as from another machine, on both sides."""
    url = endpoint(kind, tmp, f"fv-{tag}")
    env = {**os.environ, "STOKER_SHM": "0"} if kind == "tcp" else None
    with Procs() as procs:
        start_broker(procs, url, "--queue-depth", "65536", "--max-chunk", "65536")
        consumer = procs.start([CONSUMER, "--broker", url, "--batch-size", "256", "--prefetch",
                                "8", "--examples", str(total), "--stall-timeout", "10"],
                               stdout=subprocess.PIPE, text=True)
        for i in range(2):
            procs.start([BENCH_PRODUCER, "--broker", url, "--schema", schema, "--var-rows",
                         str(rows), "--chunk", "4096", "--name", f"{tag}{i}", "--log-level",
                         "error"], env=env)
        out, _ = consumer.communicate(timeout=300)
    r = json.loads(out.strip().splitlines()[-1])
    if r["status"] != "ok" or r["duplicates"]:
        raise RuntimeError(f"floor-var {tag}: the consumer ended with {r}")
    return r


def bench_floor_var(opts, tmp):
    """A variable field beside fixed ones against the same bytes in fixed fields:
    x:float32[16],t:int32[?] with every t exactly L long against x:float32[16],t:int32[L], for
    L = 16 and 256, through the broker to a C consumer that pulls and acknowledges only (the
    floor: generation free, stoker's own cost), 2 producers. Over tcp with producers pushing
    bytes (the layout's own cost, as from other machines) and over ipc on the broker's host as
    a user gets it (fixed-only chunks then go by reference, variable-length ones as bytes).
    Pairs back to back, the order swapped every pair; the median of the pairs' examples/s
    ratios. The variable side also carries an 8-byte offset per example (counted in the ratio:
    it is the layout's cost)."""
    pairs = 2 if opts.quick else 4
    res = {"configs": [], "rows": []}
    for kind in ("tcp", "ipc"):
        for rows in (16, 256):
            total = (1_000_000 if opts.quick else 4_000_000) // (1 if rows == 16 else 4)
            schemas = {"var": "x:float32[16],t:int32[?]",
                       "fixed": f"x:float32[16],t:int32[{rows}]"}
            ratios, runs = [], {"var": [], "fixed": []}
            for k in range(pairs):
                got = {}
                for side in (("var", "fixed") if k % 2 == 0 else ("fixed", "var")):
                    got[side] = floor_var_run(tmp, f"{kind}{side}{rows}k{k}", schemas[side],
                                              rows, total, kind)
                    runs[side].append(got[side])
                ratios.append(got["var"]["examples_per_second"] /
                              got["fixed"]["examples_per_second"])
            res["configs"].append({"transport": kind, "rows": rows, "schemas": schemas,
                                   "runs": runs, "ratios": ratios})
            for side in ("var", "fixed"):
                res["rows"].append((f"floor-var {kind} L={rows}: {side} ex/s (median)",
                                    statistics.median(r["examples_per_second"]
                                                      for r in runs[side]), "(figure)", None))
            ratio = statistics.median(ratios)
            res["rows"].append((f"floor-var {kind} L={rows}: var / fixed, median of {pairs}",
                                ratio, ">= 0.9", ratio >= 0.9))
    return res


def restart_to_batch(tmp):
    """SIGKILL the broker under 2 producers and a trainer, restart it on the same path: seconds
    from the restart to the first batch the new broker hands out (its delivered counter)."""
    url = endpoint("ipc", tmp, "durable-restart")
    port = free_port()
    metrics = f"http://127.0.0.1:{port}"
    args = ["--queue-depth", "64", "--metrics", metrics]
    with Procs() as procs:
        broker = start_broker(procs, url, *args)
        procs.start([TRAINER, "--broker", url, "--batch-size", "16", "--rounds", "1000000",
                     "--time-goal", "60", "--device", "cpu", "--stall-timeout", "30",
                     "--progress", "off", "--log-level", "error"], stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL)
        for i in range(2):
            procs.start([PRODUCER, "--broker", url, "--name", f"p{i}", "--delay", "0.001:0.002",
                         "--log-level", "error"])
        time.sleep(2)
        broker.kill()
        broker.wait()
        time.sleep(0.2)
        t0 = time.monotonic()
        start_broker(procs, url, *args)
        import urllib.request
        while time.monotonic() - t0 < 30:
            try:
                with urllib.request.urlopen(metrics + "/status", timeout=1) as r:
                    if json.load(r)["counters"]["delivered"] > 0:
                        return time.monotonic() - t0
            except OSError:
                pass
            time.sleep(0.005)
    raise RuntimeError("no batch within 30 s of the broker restart")


def bench_durable(opts, tmp):
    """Retention (producers keep what is not yet trained) against the same runs without it, in
    one run: the floor in pairs (on and off back to back, the order swapped every pair, the
    overhead from the median of the pairs' ratios: single floor runs on a shared 2-core machine
    spread by +-15 %, more than the effect measured), and the producers' own CPU for the same
    examples, which is the retention's direct cost; the seed workload; and the time from a
    broker restart to the first batch after it."""
    total = 1_048_576 if opts.quick else 4_194_304
    pairs = 3 if opts.quick else 8
    reps = 1 if opts.quick else 3
    scale = 10 if opts.quick else 2
    res = {"floor_on": [], "floor_off": [], "floor_ratio": [], "cpu_on": [], "cpu_off": [],
           "seed_on": [], "seed_off": []}
    for i in range(pairs):
        got = {}
        for on in ((False, True) if i % 2 == 0 else (True, False)):
            run = floor_run(tmp, "durable-on" if on else "durable-off", 2, total,
                            producer_flags=[] if on else ["--retain", "0"])
            got[on] = run["examples_per_second"]
            res["floor_on" if on else "floor_off"].append(run["examples_per_second"])
            res["cpu_on" if on else "cpu_off"].append(run["producers_cpu_seconds"])
        res["floor_ratio"].append(got[True] / got[False])
    for _ in range(reps):  # alternating, so the machine's drift hits both alike
        res["seed_off"].append(seed_rate(tmp, "off", scale, False))
        res["seed_on"].append(seed_rate(tmp, "on", scale, True))
    restarts = [restart_to_batch(tmp) for _ in range(1 if opts.quick else 3)]
    fo, ff = statistics.median(res["floor_on"]), statistics.median(res["floor_off"])
    floor_overhead = 1 - statistics.median(res["floor_ratio"])
    co, cf = statistics.median(res["cpu_on"]), statistics.median(res["cpu_off"])
    so, sf = statistics.median(res["seed_on"]), statistics.median(res["seed_off"])
    res.update({"floor_overhead": floor_overhead, "seed_overhead": 1 - so / sf,
                "seed_delay_scale": scale, "restart_to_batch_s": restarts})
    res["rows"] = [
        ("durable floor ipc P=2: ex/s retention on (median)", fo, "(figure)", None),
        ("durable floor ipc P=2: ex/s retention off (median)", ff, "(figure)", None),
        (f"durable floor: retention overhead (median of {pairs} pairs)", floor_overhead,
         "< 0.05", floor_overhead < 0.05),
        ("durable floor: producers' CPU s, retention on / off", co / cf, "(figure)", None),
        (f"durable seed (delays/{scale}): ex/s on", so, "(figure)", None),
        (f"durable seed (delays/{scale}): ex/s off", sf, "(figure)", None),
        ("durable seed: retention overhead", 1 - so / sf, "< 0.05", 1 - so / sf < 0.05),
        ("durable: s from broker restart to first batch", statistics.median(restarts), "(figure)",
         None),
    ]
    return res


RANKS_LOOP = os.path.join(ROOT, "bench", "ranks_loop.py")


def collect_ranks(ranks, timeout):
    """The JSON line of every ranks_loop.py process, then tells them all to close (a group rank
    that closed before the others printed could break their last step)."""
    deadline = time.monotonic() + timeout
    outs = []
    for r in ranks:
        line = ""
        while not line:
            if time.monotonic() > deadline:
                raise RuntimeError(f"a rank printed nothing within {timeout} s")
            line = r.stdout.readline()
            if not line and r.poll() is not None:
                raise RuntimeError(f"a rank ended (exit {r.returncode}) without its figures")
        outs.append(json.loads(line))
    for r in ranks:
        try:
            r.stdin.write("go\n")
            r.stdin.close()
        except OSError:
            pass
    for r in ranks:
        try:
            r.wait(max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.kill()
            r.wait()
    return outs


def start_rank(procs, args):
    return procs.start([PY, RANKS_LOOP, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                       text=True)


def window(outs, bytes_per_example):
    """The ranks' aggregate over the group's wall window (first t0 to last t1)."""
    t0, t1 = min(o["t0"] for o in outs), max(o["t1"] for o in outs)
    n = sum(o["examples"] for o in outs)
    return {"examples": n, "seconds": t1 - t0, "examples_per_second": n / (t1 - t0),
            "mb_per_second": n * bytes_per_example / (t1 - t0) / 1e6, "ranks": outs}


def group_commit_run(tmp, tag, every, world, batch, warmup, steps, producers):
    """world Python ranks of one group (ranks_loop.py) over `producers` synthetic producers with
    --delay 0:0; every > 0: group commit (state_dict() on every rank every `every` steps), else
    group acknowledgement. Returns the aggregate over the ranks' window."""
    url = endpoint("ipc", tmp, f"gc-{tag}")
    with Procs() as procs:
        start_broker(procs, url)
        ranks = [start_rank(procs, ["group", url, str(r), str(world), str(batch), str(warmup),
                                    str(steps), str(every), "input"]) for r in range(world)]
        for i in range(producers):
            procs.start([PRODUCER, "--broker", url, "--name", f"{tag}{i}", "--delay", "0:0",
                         "--log-level", "error"])
        res = window(collect_ranks(ranks, 150), SYNTH_BYTES)
    res["every"] = every
    return res


def bench_group_commit(opts, tmp):
    """Group commit: a group of 2 Python ranks (stoker.Client, batch 256 per rank)
    over synthetic producers with --delay 0:0, with group acknowledgement (commit=False) against
    group commit (commit=True, every rank calls state_dict() every 100 steps), in pairs back to
    back, the order swapped every pair; the cost from the median of the pairs' ratios."""
    world, batch, every, producers = 2, 256, 100, 2
    warmup, steps = 200, (1000 if opts.quick else 10000)
    pairs = 1 if opts.quick else 5
    res = {"ack": [], "commit": [], "ratios": [], "world": world, "batch": batch,
           "every": every, "producers": producers, "warmup_steps": warmup, "steps": steps}
    for k in range(pairs):
        got = {}
        for mode in (("ack", "commit") if k % 2 == 0 else ("commit", "ack")):
            r = group_commit_run(tmp, f"{mode}{k}", every if mode == "commit" else 0, world,
                                 batch, warmup, steps, producers)
            got[mode] = r["examples_per_second"]
            res[mode].append(r)
        res["ratios"].append(got["commit"] / got["ack"])
    ratio = statistics.median(res["ratios"])
    a = statistics.median(r["examples_per_second"] for r in res["ack"])
    c = statistics.median(r["examples_per_second"] for r in res["commit"])
    commit_ms = statistics.median(1000 * o["commit_seconds"] / max(1, o["commits"])
                                  for r in res["commit"] for o in r["ranks"])
    # The commit's direct cost: the share of each rank's window spent inside state_dict() (less
    # noisy than the pairs' ratio on a loaded machine; it counts the 1-2 commits of the warm-up).
    inside = statistics.median(o["commit_seconds"] / (o["t1"] - o["t0"])
                               for r in res["commit"] for o in r["ranks"])
    res["cost"] = 1 - ratio
    res["inside_state_dict"] = inside
    res["rows"] = [
        ("group-commit W=2: ex/s group ack (median)", a, "(figure)", None),
        (f"group-commit W=2: ex/s commit every {every} (median)", c, "(figure)", None),
        (f"group-commit: commit / ack, median of {pairs} pairs", ratio, ">= 0.95",
         ratio >= 0.95),
        ("group-commit: state_dict() call, ms (median)", commit_ms, "(figure)", None),
        ("group-commit: share of a rank's window in state_dict()", inside, "< 0.05",
         inside < 0.05),
    ]
    return res


IMAGE_BYTES = 224 * 224 * 3


def ranks_shm_stoker(tmp, tag, world, producers, warmup, steps):
    """world ranks of one stoker group (ranks_loop.py, commit=False), batch 32 of 150,528-byte
    examples through the broker's shared memory, fed by `producers` stoker-bench-producers on
    the broker's host (--fill stamp, pushing by reference), as bench_large's shm run. Returns
    the aggregate over the window, with the CPU seconds of every process of the side."""
    url = endpoint("ipc", tmp, f"rshm-{tag}")
    with Procs() as procs:
        broker = start_broker(procs, url, "--queue-depth", "256", "--max-message", "268435456")
        ranks = [start_rank(procs, ["group", url, str(r), str(world), "32", str(warmup),
                                    str(steps), "0", "image"]) for r in range(world)]
        pushers = [procs.start([BENCH_PRODUCER, "--broker", url, "--schema",
                                "image:uint8[224,224,3]", "--chunk", "32", "--fill", "stamp",
                                "--name", f"{tag}{i}"]) for i in range(producers)]
        outs = collect_ranks(ranks, 150)
        helpers_cpu = cpu_seconds(broker.pid) + sum(cpu_seconds(p.pid) for p in pushers)
    res = window(outs, IMAGE_BYTES)
    res["cpu_seconds"] = helpers_cpu + sum(o["cpu_seconds"] for o in outs)
    return res


def ranks_shm_dataloader(world, workers, warmup, steps):
    """world independent processes, each with its own DataLoader(num_workers=workers), batch 32
    of the same 150,528-byte images (ranks_loop.py's ImageDataset)."""
    with Procs() as procs:
        ranks = [start_rank(procs, ["dataloader", str(workers), "32", str(warmup), str(steps)])
                 for _ in range(world)]
        outs = collect_ranks(ranks, 150)
    res = window(outs, IMAGE_BYTES)
    res["cpu_seconds"] = sum(o["cpu_seconds"] for o in outs)
    return res


def bench_ranks_shm(opts, tmp):
    """Several ranks on one host reading 150,528-byte examples (batch 32) through shared memory
   : 2 and 4 ranks of one stoker group (commit=False; as many stoker-bench-producers
    on the broker's host as ranks, generation free: --fill stamp) against the same number of
    processes each with its own PyTorch DataLoader(num_workers=1) over the same ready image
    (generation free too): as many generating processes on each side, all on the machine's
    cores as the kernel schedules them. Aggregate MB/s over the ranks' window, and MB per CPU
    second of the whole side (ranks, producers and broker; ranks and their workers). Pairs
    back to back, the order swapped every pair; the median of the pairs' ratios."""
    warmup = 20
    pairs = 1 if opts.quick else 3
    res = {"configs": [], "rows": []}
    if not has_torch():
        res["rows"].append(("ranks-shm: DataLoader: torch not importable", float("nan"), "",
                            None))
    # Steps per rank: the DataLoader side is several times slower, so it takes fewer steps for
    # a window of about the same length (rates, not volumes, are compared).
    st_steps, dl_steps = (1200, 400) if opts.quick else (3000, 800)
    for world in (2, 4):
        ratios, cpu_ratios, st_all, dl_all = [], [], [], []
        for k in range(pairs):
            got = {}
            order = ("stoker", "dataloader") if k % 2 == 0 else ("dataloader", "stoker")
            for side in order:
                if side == "stoker":
                    got[side] = ranks_shm_stoker(tmp, f"w{world}k{k}", world, world, warmup,
                                                 st_steps // world)
                elif has_torch():
                    got[side] = ranks_shm_dataloader(world, 1, warmup, dl_steps // world)
            st_all.append(got["stoker"])
            if "dataloader" in got:
                dl = got["dataloader"]
                dl_all.append(dl)
                ratios.append(got["stoker"]["mb_per_second"] / dl["mb_per_second"])
                per_cpu = lambda r: r["examples"] * IMAGE_BYTES / 1e6 / r["cpu_seconds"]  # noqa
                cpu_ratios.append(per_cpu(got["stoker"]) / per_cpu(dl))
        res["configs"].append({"world": world, "stoker": st_all, "dataloader": dl_all,
                               "ratios": ratios, "per_cpu_ratios": cpu_ratios})
        s = statistics.median(r["mb_per_second"] for r in st_all)
        shared = all(o["shared"] for r in st_all for o in r["ranks"])
        res["rows"].append((f"ranks-shm W={world}: stoker batches in shared memory", float(shared),
                            "1", shared))
        res["rows"].append((f"ranks-shm W={world}: stoker group MB/s (median)", s, "(figure)",
                            None))
        if dl_all:
            d = statistics.median(r["mb_per_second"] for r in dl_all)
            res["rows"].append((f"ranks-shm W={world}: {world} x DataLoader(1) MB/s (median)", d,
                                "(figure)", None))
            res["rows"].append((f"ranks-shm W={world}: stoker / DataLoader, median of {pairs}",
                                statistics.median(ratios), "(figure)", None))
            res["rows"].append((f"ranks-shm W={world}: MB per CPU s, stoker / DataLoader",
                                statistics.median(cpu_ratios), "(figure)", None))
    return res


SCALE = os.path.join(BUILD, "scale", "stoker-scale")


def autoscale_run(tmp, tag, rule, r1, r2, cost, before_s, after_s, knobs):
    """One run of the autoscale workload: a trainer of r1 examples/s for before_s, then r2 for
    after_s; producers of `cost` s per example (they sleep: --delay), started and stopped to the
    count the rule asks. rule "stoker": stoker-scale's exec engine writes the count to a file;
    rule "cpu": what a CPU-utilisation autoscaler (Kubernetes' HPA) computes, desired =
    ceil(n x mean CPU / target), a 10 % tolerance, from the producers' CPU time in /proc, with
    the same interval, cool-down, step, down-window and bounds. Returns the timeline of counts,
    the trainer's per-second stats and the broker's signal read once a second (also printed to
    stderr, a line a second: t, count, demand, supply per producer and its spread over the
    broker's last minute, wanted)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import stoker  # noqa: E402 (the Python package of this tree, for the Status request)
    url = endpoint("ipc", tmp, f"autoscale-{tag}")
    rate_file, stats = os.path.join(tmp, f"{tag}.rate"), os.path.join(tmp, f"{tag}.stats")
    count_file = os.path.join(tmp, f"{tag}.count")
    with open(rate_file, "w") as f:
        f.write(str(r1))
    with open(count_file, "w") as f:
        f.write("1")
    script = os.path.join(tmp, f"{tag}-set.sh")
    with open(script, "w") as f:
        f.write(f'#!/bin/sh\necho "$1" > {count_file}.tmp && mv {count_file}.tmp {count_file}\n')
    os.chmod(script, 0o755)
    timeline, producers, signal_rows = [], [], []
    with Procs() as procs:
        start_broker(procs, url, "--autoscale-max", str(knobs["max"]))

        def read_signal(t):
            try:
                pools = stoker.status(url, timeout=2.0)["autoscale"]["pools"]
            except Exception as e:  # a missed reading is a gap, not a failed run
                print(f"autoscale {tag} {t:6.1f}s: no signal: {e}", file=sys.stderr)
                return
            for p in pools:
                row = {"t": round(t, 1), "count": len(producers), "demand": p["demand"],
                       "supply": p["supply_per_producer"],
                       "supply_low": p.get("supply_low", 0.0),
                       "supply_high": p.get("supply_high", 0.0), "wanted": p["wanted"]}
                signal_rows.append(row)
                print(f"autoscale {tag} {t:6.1f}s: n={row['count']:2d} demand="
                      f"{row['demand']:7.1f} supply={row['supply']:5.1f} ("
                      f"{row['supply_low']:5.1f}-{row['supply_high']:5.1f} over a minute) "
                      f"wanted={row['wanted']:2d}", file=sys.stderr, flush=True)

        def reconcile(t):
            want = int(open(count_file).read())
            while len(producers) < want:
                producers.append(procs.start([PRODUCER, "--broker", url, "--delay",
                                              f"{cost}:{cost}", "--name",
                                              f"{tag}-{len(producers)}", "--log-level",
                                              "error"]))
            while len(producers) > want:
                procs.stop(producers.pop())
            if not timeline or timeline[-1][1] != want:
                timeline.append((t, want))

        t_start = time.monotonic()
        reconcile(0.0)
        time.sleep(0.5)
        procs.start([sys.executable, os.path.join(ROOT, "bench", "autoscale_loop.py"), url,
                     rate_file, stats, str(knobs["batch"])])
        if rule == "stoker":
            procs.start([SCALE, "--broker", url, "--exec-cmd", script, "--interval",
                         str(knobs["interval"]), "--cooldown", str(knobs["cooldown"]),
                         "--max-step", str(knobs["step"]), "--down-window",
                         str(knobs["down_window"]), "--min", "1", "--max",
                         str(knobs["max"]), "--log-level", "error"], stdout=subprocess.DEVNULL)
        stepped, last_rule, last_change, cpu_prev, last_read = False, 0.0, -1e9, None, 0.0
        recent = []  # the CPU rule's recommendations over its down-window: (t, desired)
        while True:
            t = time.monotonic() - t_start
            if t >= before_s + after_s:
                break
            if not stepped and t >= before_s:
                with open(rate_file, "w") as f:
                    f.write(str(r2))
                stepped = True
            if rule == "cpu" and t - last_rule >= knobs["interval"]:
                cpu = sum(cpu_seconds(p.pid) for p in producers)
                if cpu_prev is not None and len(producers) == cpu_prev[2]:
                    util = (cpu - cpu_prev[0]) / ((t - cpu_prev[1]) * len(producers))
                    n = len(producers)
                    desired = n if abs(util / knobs["cpu_target"] - 1) <= 0.1 else \
                        max(1, min(knobs["max"], -(-n * util // knobs["cpu_target"])))
                    # Down only to the most recommended over the window (the HPA's
                    # scale-down stabilization, as stoker-scale's --down-window).
                    recent = [(at, d) for at, d in recent if at > t - knobs["down_window"]]
                    recent.append((t, desired))
                    if desired < n:
                        desired = max(d for _, d in recent)
                    desired = int(max(n - knobs["step"], min(n + knobs["step"], desired)))
                    if desired != n and t - last_change >= knobs["cooldown"]:
                        with open(count_file, "w") as f:
                            f.write(str(desired))
                        last_change = t
                cpu_prev = (cpu, t, len(producers))
                last_rule = t
            reconcile(t)
            if t - last_read >= 1.0:
                read_signal(t)
                last_read = t
            time.sleep(0.2)
    with open(stats) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return timeline, rows, signal_rows


def autoscale_figures(timeline, rows, before_s, after_s, r2, cost):
    """Settling (the last change after the step), producers used / the minimum that keeps the
    trainer fed, data wait after settling, and the changes of direction. The minimum twice: from
    the producers' nominal cost, ceil(r2 x cost), and from their rate as measured on this run by
    the trainer (the median, over the seconds after the step in which it was starved, waiting
    over 90 %, of the examples it took per second per producer running: all of them flat out,
    so their real rate with the machine's load, which the nominal cost does not know)."""
    need = -(-r2 * cost // 1)
    after = [(t, n) for t, n in timeline if t >= before_s]
    settle_t = after[-1][0] if after else before_s
    used = timeline[-1][1]
    # The trainer's lines are on its own clock: the run's end is its last line.
    end_at = rows[-1]["at"]
    settled_from = end_at - (before_s + after_s - settle_t) + 5  # 5 s for the new ones to start
    tail = [r for r in rows if r["at"] >= settled_from]
    wait = sum(r["waited"] for r in tail) / max(1e-9, sum(r["span"] for r in tail))
    moves = [b[1] - a[1] for a, b in zip(timeline, timeline[1:]) if b[0] >= before_s]
    turns = sum(1 for a, b in zip(moves, moves[1:]) if (a > 0) != (b > 0))
    t0 = end_at - (before_s + after_s)  # the bench's time 0 on the trainer's clock

    def count_at(t):
        return [n for at, n in timeline if at <= t][-1]

    starved = [r["taken"] / r["span"] / count_at(r["at"] - t0 - r["span"]) for r in rows
               if r["at"] - r["span"] - t0 >= before_s and r["waited"] > 0.9 * r["span"]
               and count_at(r["at"] - t0 - r["span"]) == count_at(r["at"] - t0)]
    per_producer = statistics.median(starved) if starved else float("nan")
    need_measured = -(-r2 // per_producer) if starved else float("nan")
    return {"settle_s": settle_t - before_s, "used": used, "need": need,
            "used_over_need": used / need, "per_producer_measured": per_producer,
            "need_measured": need_measured, "used_over_need_measured": used / need_measured,
            "wait_after": wait, "turns_after_step": turns,
            "tail_s": sum(r["span"] for r in tail)}


def bench_autoscale(opts, tmp):
    """A step change in demand: a trainer of 100 examples/s, then 250; producers of
    0.02 s per example that sleep (like the reference workload), started and stopped by the
    rule. stoker-scale's exec engine on the broker's signal against the rule of a CPU
    autoscaler on the producers' CPU % (target 70 %), same workload, one after the other."""
    r1, r2, cost = 100, 250, 0.02
    before_s, after_s = (20, 60) if opts.quick else (30, 180)
    knobs = {"interval": 1, "cooldown": 5, "step": 4, "down_window": 10, "max": 12, "batch": 25,
             "cpu_target": 0.7}
    res = {"r1": r1, "r2": r2, "cost": cost, "knobs": knobs, "before_s": before_s,
           "after_s": after_s, "rows": []}
    for rule, secs in (("stoker", after_s), ("cpu", min(after_s, 90))):
        timeline, rows, signal_rows = autoscale_run(tmp, rule, rule, r1, r2, cost, before_s,
                                                    secs, knobs)
        f = autoscale_figures(timeline, rows, before_s, secs, r2, cost)
        res[rule] = {"timeline": timeline, "figures": f, "signal": signal_rows,
                     "trainer": rows}
        name = "stoker-scale" if rule == "stoker" else "CPU-% rule"
        res["rows"] += [
            (f"autoscale {name}: seconds to settle after the step", f["settle_s"], "< 60",
             f["settle_s"] < 60 if rule == "stoker" else None),
            (f"autoscale {name}: producers used / minimum ({f['used']}/{f['need']:.0f})",
             f["used_over_need"], "<= 1.25",
             f["used_over_need"] <= 1.25 if rule == "stoker" else None),
            (f"autoscale {name}: used / minimum at the measured rate "
             f"({f['used']}/{f['need_measured']:.0f})", f["used_over_need_measured"], "<= 1.25",
             f["used_over_need_measured"] <= 1.25 if rule == "stoker" else None),
            (f"autoscale {name}: examples/s per producer measured (nominal {1 / cost:.0f})",
             f["per_producer_measured"], "(figure)", None),
            (f"autoscale {name}: data wait after settling", f["wait_after"], "< 0.02",
             f["wait_after"] < 0.02 if rule == "stoker" else None)]
        if rule == "stoker":
            res["rows"].append((f"autoscale {name}: changes of direction over {secs} s steady",
                                f["turns_after_step"], "<= 2", f["turns_after_step"] <= 2))
    return res


PULL = os.path.join(BUILD, "consumer", "stoker-pull")


def mix_run(tmp, tag, mixed, examples):
    """One side of bench_mix: examples/s of stoker-pull (batches of 256, raw to /dev/null) from 3
    producers whose examples cost nothing to make (stoker-bench-producer --fill stamp, chunks of
    256), one per pool (a, b, c), with the mixture a=1,b=1,c=1 or none: the broker's and the
    consumer's work, which mixing adds to.
    The clock runs from the first byte to the last."""
    url = endpoint("ipc", tmp, f"mix-{tag}")
    with Procs() as procs:
        start_broker(procs, url)
        for pool in "abc":
            procs.start([BENCH_PRODUCER, "--broker", url, "--pool", pool, "--name", f"{tag}{pool}",
                         "--fill", "stamp", "--chunk", "256"])
        time.sleep(0.5)  # every pool has examples queued before the clock starts
        args = [PULL, "--broker", url, "--format", "raw", "--batch-size", "256",
                "--max-examples", str(examples), "--stall-timeout", "20"]
        if mixed:
            args += ["--mix", "a=1,b=1,c=1"]
        t0 = time.monotonic()
        out = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
        secs = time.monotonic() - t0
        if out.returncode != 0 or len(out.stdout) != examples * SYNTH_BYTES:
            raise RuntimeError(f"stoker-pull exited {out.returncode} with {len(out.stdout)} "
                               f"bytes: {out.stderr.decode(errors='replace')[-300:]}")
    return examples / secs


def bench_mix(opts, tmp):
    """What a mixture costs: stoker-pull's examples/s from 3 free producers in 3 pools with the
    mixture a=1,b=1,c=1 over the same without one (mix_run), median of 5 pairs run back to back,
    the order swapped each time (this machine is shared)."""
    examples = 300_000 if opts.quick else 1_500_000
    pairs = []
    for k in range(5):
        runs = {}
        for mixed in ((True, False) if k % 2 == 0 else (False, True)):
            runs[mixed] = mix_run(tmp, f"{k}{int(mixed)}", mixed, examples)
        pairs.append((runs[True] / runs[False], runs[True], runs[False]))
    ratio = statistics.median(p[0] for p in pairs)
    mid = sorted(pairs, key=lambda p: p[0])[len(pairs) // 2]
    return {"ratio": ratio, "pair_ratios": [p[0] for p in pairs], "mixed": mid[1],
            "unmixed": mid[2],
            "rows": [("mix: 3 pools a=1,b=1,c=1, examples/s", mid[1], "(figure)", None),
                     ("mix: the same producers unmixed, examples/s", mid[2], "(figure)", None),
                     ("mix: mixed / unmixed, median of 5 pairs", ratio, ">= 0.95",
                      ratio >= 0.95)]}


SHARE_PRODUCERS = 2
SHARE_DELAY = "0.0004:0.0004"  # each producer makes about 2,500 examples/s


def share_side(tmp, tag, jobs, brokers, examples):
    """One side of bench_share: `brokers` brokers, each with SHARE_PRODUCERS producers of token
    sequences (stoker-producer --workload tokens, their rate set by --delay: the expensive
    generation) and jobs / brokers consumers (stoker-pull --job jK, raw to /dev/null), each
    taking `examples`. The consumers say hello first (jobs that start together share every
    example), then the producers start and the clock runs. Returns (per-job examples/s, the
    producers' CPU seconds, examples the producers made)."""
    with Procs() as procs:
        urls, pulls, producers = [], [], []
        for k in range(brokers):
            url = endpoint("ipc", tmp, f"share-{tag}-{k}")
            start_broker(procs, url)
            urls.append(url)
        for j in range(jobs):
            url = urls[j % brokers]
            pulls.append(procs.start([PULL, "--broker", url, "--job", f"j{j}", "--format", "raw",
                                      "--batch-size", "64", "--max-examples", str(examples),
                                      "--stall-timeout", "30"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE))
        deadline = time.monotonic() + 20
        while sum(len(stoker_status(u).get("jobs") or []) for u in urls) < jobs:
            if time.monotonic() > deadline:
                raise RuntimeError("the jobs did not say hello")
            time.sleep(0.05)
        t0 = time.monotonic()
        for url in urls:
            for k in range(SHARE_PRODUCERS):
                producers.append(procs.start(
                    [PRODUCER, "--broker", url, "--name", f"{tag}p{k}", "--workload", "tokens",
                     "--lengths", "lognormal:512:2048", "--delay", SHARE_DELAY, "--chunk", "32",
                     "--log-level", "error"]))
        rates = []
        for p in pulls:
            _, err = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError(f"stoker-pull exited {p.returncode}: {err.decode()[-300:]}")
            rates.append(examples / (time.monotonic() - t0))
        cpu = sum(cpu_seconds(p.pid) for p in producers)
        made = sum(sum(x["accepted"] for x in stoker_status(u)["producers"]) for u in urls)
    return rates, cpu, made


def bench_share(opts, tmp):
    """Generate once, train many: 4 jobs on one pool of producers against 1 job on the same
    producers (each job's examples/s, side by side), and the producers' CPU per example trained by
    each job: shared (4 jobs, 1 pool), alone (1 job, 1 pool) and with a pool per job (4 brokers,
    4 pools). Three rounds, the order turned each time; medians."""
    examples = 8_000 if opts.quick else 24_000
    rounds = []
    for r in range(3):
        sides = {}
        order = [("one", 1, 1), ("shared", 4, 1), ("apart", 4, 4)]
        for name, jobs, brokers in (order if r % 2 == 0 else order[::-1]):
            sides[name] = share_side(tmp, f"{r}{name}", jobs, brokers, examples)
        one_rate = sides["one"][0][0]
        rounds.append({
            "one": one_rate, "shared_min": min(sides["shared"][0]),
            "rate_ratio": min(sides["shared"][0]) / one_rate,
            "cpu_one": sides["one"][1], "cpu_shared": sides["shared"][1],
            "cpu_apart": sides["apart"][1],
            "cpu_ratio": sides["shared"][1] / sides["one"][1],
            "cpu_apart_ratio": sides["apart"][1] / sides["one"][1],
            "made": {k: v[2] for k, v in sides.items()}})
    med = {k: statistics.median(x[k] for x in rounds)
           for k in ("one", "shared_min", "rate_ratio", "cpu_ratio", "cpu_apart_ratio")}
    return {"rounds": rounds, **med,
            "rows": [("share: 1 job on 2 producers, examples/s", med["one"], "(figure)", None),
                     ("share: 4 jobs on the same 2 producers, slowest job's examples/s",
                      med["shared_min"], "(figure)", None),
                     ("share: slowest of 4 jobs / 1 job, examples/s", med["rate_ratio"], ">= 0.95",
                      med["rate_ratio"] >= 0.95),
                     ("share: producers' CPU, 4 jobs shared / 1 job", med["cpu_ratio"], "<= 1.1",
                      med["cpu_ratio"] <= 1.1),
                     ("share: producers' CPU, a pool per job / 1 job", med["cpu_apart_ratio"],
                      "(~4)", None)]}


BENCHES = {"seed": bench_seed, "floor": bench_floor, "large": bench_large, "wait": bench_wait,
           "detect": bench_detect, "images": bench_images, "images_tv": bench_images_tv,
           "images-dataset": bench_images_dataset,
           "ranks": bench_ranks, "epochs": bench_epochs, "durable": bench_durable,
           "chunks": bench_chunks, "group-commit": bench_group_commit,
           "ranks-shm": bench_ranks_shm, "tokens": bench_tokens, "autoscale": bench_autoscale,
           "ragged": bench_ragged, "floor-var": bench_floor_var, "defaults": bench_defaults,
           "mix": bench_mix, "buckets": bench_buckets, "cpu-exec": bench_cpu_exec,
           "share": bench_share}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", default=",".join(BENCHES), help="comma list of benchmarks")
    ap.add_argument("--quick", action="store_true", help="smaller runs, for a look")
    ap.add_argument("--json", default=None, help="where to write the results")
    opts = ap.parse_args()
    names = [n for n in opts.only.split(",") if n]
    for n in names:
        if n not in BENCHES:
            ap.error(f"unknown benchmark '{n}' (choose from {', '.join(BENCHES)})")
    for exe in (BROKER, PRODUCER, TRAINER, BENCH_PRODUCER, CONSUMER, NNG_RAW):
        if not os.access(exe, os.X_OK):
            sys.exit(f"bench: {exe} is missing: run scripts/build.sh first")
    results = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
               "machine": f"{platform.node()} {platform.machine()} {os.cpu_count()} cores",
               "quick": opts.quick, "benchmarks": {}}
    rows = []
    path = opts.json or os.path.join(ROOT, "bench", "out",
                                     f"results-{results['date'].replace(':', '')}.json")

    def save(res):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(res, f, indent=1, default=str)

    with tempfile.TemporaryDirectory(prefix="stoker-bench.") as tmp:
        for n in names:
            print(f"bench: {n} ...", file=sys.stderr, flush=True)
            t0 = time.monotonic()
            try:
                r = BENCHES[n](opts, tmp)
            except Exception as e:  # a broken benchmark is reported, the others still run
                print(f"bench: {n} failed: {e}", file=sys.stderr)
                results["benchmarks"][n] = {"error": str(e)}
                rows.append((f"{n}: FAILED", float("nan"), str(e)[:40], False))
                continue
            r["wall_s"] = time.monotonic() - t0
            rows.extend(r.pop("rows"))
            results["benchmarks"][n] = r
            save(results)  # after each benchmark, so a later failure loses nothing
    print(f"\n{'figure':56} {'measured':>14}  {'target':>12}  met")
    for name, value, target, ok in rows:
        met = "" if ok is None else ("yes" if ok else "NO")
        print(f"{name:56} {value:>14.4g}  {target:>12}  {met}")
    save(results)
    print(f"\nresults: {path}")


if __name__ == "__main__":
    main()
