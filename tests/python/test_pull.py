"""stoker-pull: what an exec producer sent (known numbers, from awk) comes out of stoker-pull as
the same numbers, as text lines and as raw little-endian records; exit codes as the trainer's
(3 supply ended, 4 stalled, 2 usage, 0 done)."""

import struct
import subprocess
import time

from helpers import PULL, Cluster, run

SCHEMA = "a:int32[1],b:float32[2],c:float64[1]"
N = 100
# Example i: a = i - 50, b = (i / 4, -1.5 i) (exact in float32), c = i / 3 (printed exactly).
AWK = ("awk 'BEGIN { for (i = 0; i < %d; i++) printf \"%%d %%.2f %%.1f %%.17g\\n\", "
       "i - 50, i / 4, -1.5 * i, i / 3 }'" % N)


def expected():
    out = subprocess.run(["sh", "-c", AWK], capture_output=True, text=True, check=True).stdout
    rows = []
    for line in out.splitlines():
        a, b0, b1, c = line.split()
        rows.append((int(a), float(b0), float(b1), float(c)))
    assert len(rows) == N
    return rows


def exec_cluster():
    c = Cluster()
    c.producer("--generator", "exec", "--exec", AWK, "--schema", SCHEMA, "--format", "text",
               "--chunk", "7")
    return c


def pull(url, *args, timeout=30):
    return subprocess.run([PULL, "--broker", url] + list(args), capture_output=True,
                          timeout=timeout)


def test_text_output_parses_back_into_the_numbers_sent():
    with exec_cluster() as c:
        out = pull(c.url, "--batch-size", "8", "--stall-timeout", "5")
        assert out.returncode == 3, (out.returncode, out.stderr)  # supply ended: all finished
        assert b"finished" in out.stderr, out.stderr
        lines = out.stdout.decode().splitlines()
        got = []
        for line in lines:
            a, b0, b1, c_ = line.split()
            got.append((int(a), float(b0), float(b1), float(c_)))
        # Pulls in flight can overtake each other: batches may arrive in any order.
        assert sorted(got) == expected(), got[:5]


def test_raw_output_is_little_endian_records_in_schema_order():
    with exec_cluster() as c:
        out = pull(c.url, "--format", "raw", "--batch-size", "16", "--max-examples", str(N))
        assert out.returncode == 0, (out.returncode, out.stderr)  # done: all it was asked for
        rec = struct.Struct("<iffd")
        assert len(out.stdout) == N * rec.size
        got = [rec.unpack_from(out.stdout, i * rec.size) for i in range(N)]
        assert sorted(got) == expected(), got[:5]


def test_max_examples_writes_exactly_that_many_and_leaves_the_rest():
    with exec_cluster() as c:
        out = pull(c.url, "--batch-size", "8", "--max-examples", "13")
        assert out.returncode == 0, out.stderr
        assert len(out.stdout.decode().splitlines()) == 13
        rest = pull(c.url, "--batch-size", "8", "--stall-timeout", "5")
        assert rest.returncode == 3, rest.stderr
        lines = out.stdout.decode().splitlines() + rest.stdout.decode().splitlines()
        assert sorted(int(l.split()[0]) for l in lines) == [i - 50 for i in range(N)]


def test_no_data_within_the_stall_timeout_exits_4():
    with Cluster("--schema", SCHEMA) as c:
        out = pull(c.url, "--stall-timeout", "0.5")
        assert out.returncode == 4, (out.returncode, out.stderr)
        assert b"stalled" in out.stderr


def test_a_broker_that_went_away_exits_6_naming_it():
    import signal
    with Cluster("--schema", SCHEMA) as c:
        p = subprocess.Popen([PULL, "--broker", c.url, "--stall-timeout", "1"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        time.sleep(0.5)
        c.broker.send_signal(signal.SIGKILL)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 6, (p.returncode, err)
        assert b"the broker went away" in err and c.url.encode() in err, err


def test_bad_flags_exit_2_and_help_exits_0():
    for args in (["--batch-size", "0"], ["--format", "csv"], ["--bogus"], ["--stall-timeout"],
                 ["extra"]):
        out = subprocess.run([PULL, "--broker", "ipc:///nonexistent"] + args,
                             capture_output=True, timeout=10)
        assert out.returncode == 2, (args, out.returncode)
        assert b"usage" in out.stderr
    assert subprocess.run([PULL], capture_output=True, timeout=10).returncode == 2
    h = subprocess.run([PULL, "--help"], capture_output=True, timeout=10)
    assert h.returncode == 0 and b"--max-examples" in h.stdout
    v = subprocess.run([PULL, "--version"], capture_output=True, timeout=10)
    assert v.returncode == 0 and v.stdout.startswith(b"stoker-pull ")


run(globals())
