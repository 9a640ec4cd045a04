"""Every executable's command line, checked from its own option table: the hidden --cli-table
prints one row per flag (name, kind, metavar, integer bounds, real bounds, choices), so a flag
added to a table is covered here without touching this file.

For each binary: every flag is in --help (exit 0, stdout) with --help and --version; the bounds
of each numeric flag and every choice are accepted (checked by putting --help after them: parsing
stops at the first bad value, so exit 0 means the value parsed); out-of-range and malformed
values, missing values and unknown flags exit 2 naming the flag (and the value); --version
prints the same version for all. Finally the defaults the Python package and the trainer
use are libstoker's. No broker is started: every command here stops at parsing."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import traceback

BINARIES = {
    "stoker-broker": os.environ.get("STOKER_BROKER_BIN", "build/server/stoker-broker"),
    "stoker-producer": os.environ.get("STOKER_PRODUCER_BIN", "build/producer/stoker-producer"),
    "stoker-trainer": os.environ.get("STOKER_TRAINER_BIN", "build/trainer/stoker-trainer"),
    "stoker-pull": os.environ.get("STOKER_PULL_BIN", "build/consumer/stoker-pull"),
    "stoker-bench-producer": os.environ.get("STOKER_BENCH_PRODUCER_BIN",
                                            "build/bench/stoker-bench-producer"),
    "stoker-bench-consumer": os.environ.get("STOKER_BENCH_CONSUMER_BIN",
                                            "build/bench/stoker-bench-consumer"),
}
U64_MAX = 2**64 - 1


def run(prog, *args):
    return subprocess.run([BINARIES[prog]] + list(args), capture_output=True, timeout=30,
                          text=True, errors="replace")


class Row:
    def __init__(self, line):
        f = line.split("\t")
        assert len(f) == 8, "bad --cli-table line %r" % line
        self.name, self.kind, self.metavar = f[0], f[1], f[2]
        self.imin, self.imax = int(f[3]), int(f[4])
        self.dmin, self.dmax = float(f[5]), float(f[6])
        self.choices = f[7].split(",") if f[7] else []
        self.flag = "--" + self.name


def table(prog):
    out = run(prog, "--cli-table")
    assert out.returncode == 0, (prog, out.returncode, out.stderr)
    rows = [Row(line) for line in out.stdout.splitlines()]
    assert rows, "%s printed no rows" % prog
    names = [r.name for r in rows]
    assert len(names) == len(set(names)), "%s has a flag twice: %s" % (prog, names)
    return rows


def num(x):
    return "%.17g" % x


def good_values(r):
    """Values at the edges of what the row accepts."""
    if r.kind in ("uint", "bytes"):
        return [str(r.imin), str(r.imax)]
    if r.kind in ("seconds", "number"):
        return [num(r.dmin), num(r.dmax)]
    if r.kind == "range":
        return ["0", num(r.dmax), "0:" + num(r.dmax), "%s:%s" % (num(r.dmax), num(r.dmax))]
    if r.kind == "choice":
        return list(r.choices)
    if r.kind == "string" and r.imax > 0:
        return ["x" * r.imin, "x" * r.imax]
    return []


def bad_values(r, tmp):
    """Malformed and out-of-range values of the row's kind."""
    if r.kind in ("uint", "bytes"):
        v = ["", "x", "-1", "1.5", "12abc", " 5", "0x10", "1e3", str(2**70)]
        if r.imin > 0:
            v.append(str(r.imin - 1))
        if r.imax < U64_MAX:
            v.append(str(r.imax + 1))
        return v
    if r.kind in ("seconds", "number"):
        return ["", "x", "nan", "inf", "-inf", "1e999", "5s", num(r.dmax * 2),
                num(r.dmin / 2) if r.dmin > 0 else "-1"]
    if r.kind == "range":
        return ["", "x", "-1", "1:", ":1", "2:1", "0:-1", num(r.dmax * 2), "0:" + num(r.dmax * 2)]
    if r.kind == "choice":
        return ["", "bogus", r.choices[0].upper(), r.choices[0] + "x"]
    if r.kind == "string" and r.imax > 0:
        return ["x" * (r.imin - 1), "x" * (r.imax + 1)] if r.imin > 0 else ["x" * (r.imax + 1)]
    if r.kind == "token-file":
        empty = os.path.join(tmp, "empty-token")
        open(empty, "w").close()
        return [os.path.join(tmp, "no-such-file"), empty]
    if r.kind == "custom":
        return ["", "bogus-value"]
    return []


def check_help(prog, rows):
    out = run(prog, "--help")
    assert out.returncode == 0 and out.stderr == "", (prog, out.returncode, out.stderr)
    assert out.stdout.startswith("usage: %s " % prog), out.stdout[:80]
    for r in rows:
        spelled = r.flag + (" " + r.metavar if r.metavar else "")
        assert spelled in out.stdout, "%s --help lacks %r:\n%s" % (prog, spelled, out.stdout)
    assert "--help, --version" in out.stdout


def check_accepted(prog, rows):
    for r in rows:
        for v in good_values(r):
            out = run(prog, r.flag, v, "--help")
            assert out.returncode == 0, "%s %s %r refused (%d): %s" % (
                prog, r.flag, v, out.returncode, out.stderr)


def check_refused(prog, rows, tmp):
    n = 0
    for r in rows:
        for v in bad_values(r, tmp):
            out = run(prog, r.flag, v, "--help")
            assert out.returncode == 2, "%s %s %r: exit %d, expected 2; stderr: %s" % (
                prog, r.flag, v, out.returncode, out.stderr)
            assert r.flag in out.stderr, "%s %s %r: the message does not name the flag: %s" % (
                prog, r.flag, v, out.stderr)
            assert "'%s'" % v in out.stderr, "%s %s %r: the message lacks the value: %s" % (
                prog, r.flag, v, out.stderr)
            assert out.stdout == "", "%s %s %r wrote to stdout" % (prog, r.flag, v)
            for c in r.choices:
                assert c in out.stderr, "%s %s: the message lacks choice %r: %s" % (
                    prog, r.flag, c, out.stderr)
            n += 1
        if r.kind == "strings":
            args = [a for _ in range(r.imax + 1) for a in (r.flag, "x")]
            out = run(prog, *args)
            assert out.returncode == 2 and r.flag in out.stderr, (prog, r.flag, out.stderr)
            assert "at most %d" % r.imax in out.stderr, out.stderr
        if r.kind != "flag":
            out = run(prog, r.flag)
            assert out.returncode == 2 and r.flag in out.stderr, (prog, r.flag, out.stderr)
    return n


def test_every_binary_follows_its_table():
    versions = {}
    with tempfile.TemporaryDirectory(prefix="stoker-cli-") as tmp:
        for prog in BINARIES:
            rows = table(prog)
            check_help(prog, rows)
            check_accepted(prog, rows)
            n = check_refused(prog, rows, tmp)
            assert n >= len([r for r in rows if r.kind not in ("flag", "string", "strings")])
            for unknown in (["--no-such-flag"], ["--no-such-flag=3"], ["stray-argument"]):
                out = run(prog, *unknown)
                assert out.returncode == 2, (prog, unknown, out.returncode)
                assert unknown[0] in out.stderr and "usage: %s" % prog in out.stderr, (
                    prog, unknown, out.stderr)
            # log.c's level names, in any case, as before the table.
            for level in ("ERROR", "Warning", "info", "debug"):
                out = run(prog, "--log-level", level, "--help")
                assert out.returncode == 0, (prog, level, out.stderr)
            out = run(prog, "--version")
            assert out.returncode == 0 and out.stdout.startswith(prog + " "), (prog, out.stdout)
            versions[prog] = out.stdout.split()[1]
    assert len(set(versions.values())) == 1, "versions differ: %s" % versions
    want = os.environ.get("STOKER_VERSION")
    if want is not None:
        assert set(versions.values()) == {want}, (versions, want)


def test_usage_errors_across_flags():
    cases = [
        ("stoker-broker", [], "--listen URL is required"),
        ("stoker-producer", ["--delay", "0:0"], "--broker URL is required"),
        ("stoker-trainer", ["--rounds", "3"], "give exactly one of --broker URL or --inline"),
        ("stoker-trainer", ["--inline", "--broker", "ipc:///x"], "give exactly one of"),
        ("stoker-trainer", ["--broker", "ipc:///x", "--delay", "0:0"], "--delay applies"),
        ("stoker-trainer", ["--broker", "ipc:///x", "--checkpoint-every", "5"],
         "--checkpoint-every goes with --checkpoint PATH"),
        ("stoker-trainer", ["--inline", "--identity-log", "/tmp/l"], "--identity-log applies"),
        ("stoker-trainer", ["--broker", "ipc:///x", "--resume", "/nonexistent/c.ckpt"],
         "--resume: /nonexistent/c.ckpt"),
        ("stoker-trainer", ["--broker", "ipc:///x", "--resume-also", "/tmp/r3.ckpt"],
         "--resume-also goes with --resume PATH"),
        ("stoker-pull", [], "--broker URL is required"),
        ("stoker-bench-consumer", [], "--broker URL is required"),
        ("stoker-producer", ["--broker", "ipc:///x", "--tls-ca", "/x"], "--tls-* options need"),
        ("stoker-pull", ["--broker", "ipc:///x", "--tls-ca", "/x"], "--tls-* options need"),
        ("stoker-pull", ["--broker", "tls+tcp://127.0.0.1:1"], "--tls-ca"),
        # Not a URL: named, with the URL it probably meant, before anything dials.
        ("stoker-producer", ["--broker", "localhost:7070"], "did you mean 'tcp://localhost:7070'"),
        ("stoker-trainer", ["--broker", "localhost:7070"], "did you mean 'tcp://localhost:7070'"),
        ("stoker-pull", ["--broker", "localhost:7070"], "did you mean 'tcp://localhost:7070'"),
        ("stoker-bench-consumer", ["--broker", "localhost:7070"], "is not a URL"),
        ("stoker-broker", ["--listen", "localhost:7070"], "did you mean 'tcp://localhost:7070'"),
        ("stoker-producer", ["--broker", "tcp://gpu-box"], "expected HOST:PORT"),
        ("stoker-broker", ["--listen", "carrier-pigeon://x"], "is not a URL stoker speaks"),
        # A bad augmentation pipeline is found before the folder is read.
        ("stoker-producer", ["--broker", "ipc:///x", "--generator", "images", "--images",
                             "/nonexistent", "--augment", "rrc(0.08,1;0.75,1.33),wobble"],
         "--augment 'rrc(0.08,1;0.75,1.33),wobble': augment: unknown operation 'wobble'"),
        # A job's name (docs/sharing.md) is 1..63 bytes, refused before anything dials.
        ("stoker-pull", ["--broker", "ipc:///x", "--job", ""], "--job '': expected 1..63"),
        ("stoker-pull", ["--broker", "ipc:///x", "--job", "j" * 64],
         "--job '%s': expected 1..63" % ("j" * 64)),
        ("stoker-trainer", ["--broker", "ipc:///x", "--job", ""], "--job '': expected 1..63"),
        ("stoker-trainer", ["--broker", "ipc:///x", "--job", "j" * 64],
         "--job '%s': expected 1..63" % ("j" * 64)),
        ("stoker-trainer", ["--inline", "--job", "a"], "--job applies to --broker only"),
    ]
    for prog, args, want in cases:
        out = run(prog, *args)
        assert out.returncode == 2 and want in out.stderr, (prog, args, out.returncode,
                                                            out.stderr)


def test_lines_to_the_journal_carry_a_priority_and_no_second_timestamp():
    """Under systemd (JOURNAL_STREAM names stderr's device and inode) a log line is
    "<N>role LEVEL message": the journal keeps its own time and pid and takes <N> as the priority.
    Elsewhere, and when JOURNAL_STREAM names another file, the line has its own timestamp."""
    with tempfile.TemporaryDirectory(prefix="stoker-cli-") as tmp:
        err_path = os.path.join(tmp, "stderr")

        def lines(env_value):
            with open(err_path, "w") as err:
                st = os.fstat(err.fileno())
                env = dict(os.environ)
                env.pop("JOURNAL_STREAM", None)
                if env_value is not None:
                    env["JOURNAL_STREAM"] = env_value(st)
                subprocess.run([BINARIES["stoker-producer"], "--generator", "exec", "--exec",
                                "echo bad", "--schema", "x:float32[1]", "--measure", "3"],
                               stderr=err, stdout=subprocess.DEVNULL, env=env, timeout=30)
            with open(err_path) as f:
                return [l for l in f.read().splitlines() if l]

        journal = lines(lambda st: "%d:%d" % (st.st_dev, st.st_ino))
        assert journal and all(l.startswith("<") for l in journal), journal
        assert any(l.startswith("<3>producer ERROR ") for l in journal), journal
        assert not any("Z producer[" in l for l in journal), journal
        other = lines(lambda st: "%d:%d" % (st.st_dev, st.st_ino + 1))
        plain = lines(None)
        for got in (other, plain):
            assert got and all(l[:4].isdigit() and "Z producer[" in l for l in got), got


def test_busy_metrics_address_is_a_usage_error_before_listening():
    """A broker whose --metrics address is taken exits 2 and never printed "listening" (which
    scripts wait for): the metrics server starts before the listeners."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with tempfile.TemporaryDirectory() as tmp:
            out = run("stoker-broker", "--listen", "ipc://%s/b.ipc" % tmp, "--metrics",
                      "http://127.0.0.1:%d" % port)
    assert out.returncode == 2, (out.returncode, out.stdout, out.stderr)
    assert "listening" not in out.stdout, out.stdout
    assert "--metrics http://127.0.0.1:%d: cannot listen" % port in out.stderr, out.stderr


def test_unknown_host_is_named():
    """A --broker host that does not resolve is said so, not only "no broker answered"."""
    out = run("stoker-pull", "--broker", "tcp://no-such-host.invalid:7070", "--stall-timeout",
              "1")
    assert out.returncode != 0 and out.returncode != 2, (out.returncode, out.stderr)
    assert "unknown host 'no-such-host.invalid'" in out.stderr, out.stderr
    out = run("stoker-producer", "--broker", "tcp://no-such-host.invalid:7070", "--broker-wait",
              "1")
    assert out.returncode == 3, (out.returncode, out.stderr)
    assert "unknown host 'no-such-host.invalid'" in out.stderr, out.stderr


def test_run_sh_device_gpu_without_a_gpu_stops_with_the_reason():
    """scripts/run.sh --device gpu where no GPU is usable (or the build has no CUDA backend)
    stops with the trainer's reason and its exit code, and prints no table of zeros."""
    if (os.environ.get("STOKER_HAS_CUDA") == "1" and shutil.which("nvidia-smi") and
            subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0):
        print("(skipped: a GPU is present and this build has the CUDA backend)")
        return
    src = os.environ.get("STOKER_SOURCE_ROOT", ".")
    env = dict(os.environ, STOKER_BUILD=os.environ.get("STOKER_BUILD_ROOT", "build"))
    out = subprocess.run(["bash", os.path.join(src, "scripts/run.sh"), "--quick", "--producers",
                          "2", "--device", "gpu"], capture_output=True, text=True, timeout=120,
                         env=env)
    assert out.returncode not in (0, 2), (out.returncode, out.stderr)
    assert "run.sh: the trainer failed" in out.stderr, out.stderr
    assert "--device gpu" in out.stderr, out.stderr  # the trainer's own reason
    assert "speedup" not in out.stdout and "inline" not in out.stdout, out.stdout
    out = subprocess.run(["bash", os.path.join(src, "scripts/run.sh"), "--device", "tpu"],
                         capture_output=True, text=True, timeout=30, env=env)
    assert out.returncode == 2 and "--device needs auto, cpu or gpu" in out.stderr, out


def help_default(prog, flag):
    """The "(default X)" --help gives for flag."""
    out = run(prog, "--help").stdout
    line = next(l for l in out.splitlines() if l.strip().startswith(flag + " "))
    return line.split("(default ")[1].rstrip(")")


def test_defaults_are_the_librarys():
    sys.path.insert(0, os.environ.get("PYTHONPATH", "python"))
    from stoker import _lib, client
    d = _lib.defaults()
    # The consumer's batch_size 0 is the default of 4 (or, with max_tokens, no cap: consumer.h).
    batch_size = d.batch_size or 4
    for prog in ("stoker-trainer", "stoker-bench-consumer"):
        assert int(help_default(prog, "--batch-size")) == batch_size, prog
    for prog in ("stoker-trainer", "stoker-pull", "stoker-bench-consumer"):
        assert int(help_default(prog, "--prefetch")) == d.prefetch, prog
        assert float(help_default(prog, "--stall-timeout")) * 1000 == d.stall_timeout_ms, prog
    c = client.Client("ipc:///nonexistent")
    assert (c.prefetch, c.stall_timeout) == (d.prefetch, d.stall_timeout_ms / 1000.0)
    # The reference experiment (DESIGN.md): batch 4, prefetch 4, stall 4 s.
    assert (batch_size, d.prefetch, d.stall_timeout_ms) == (4, 4, 4000)


def main():
    failed = 0
    tests = [(k, v) for k, v in globals().items() if k.startswith("test_") and callable(v)]
    for name, fn in tests:
        try:
            fn()
            print("PASS", name, flush=True)
        except Exception:
            failed += 1
            print("FAIL", name, flush=True)
            traceback.print_exc()
    print("%d passed, %d failed" % (len(tests) - failed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
