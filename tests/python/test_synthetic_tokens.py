"""The synthetic token workload (docs/running.md, Generators): stoker-producer --workload tokens
--lengths DIST makes tokens:int32[?<=CAP],label:int64 with lengths from the distribution
(log-normal mean within a tolerance, the cap never passed, uniform and fixed exact), tokens in
[0, vocab), the label what the tokens say, every value the same from the same seed and name
(and other from another seed), each example through a real broker exactly once."""

import subprocess

from helpers import PRODUCER, Cluster, require, run

np = require("numpy")
import stoker  # noqa: E402


def collect(c, producers, n_each, batch_size=64):
    """Every example the producers make: {(session, seq): (tokens, label)}, failing on one
    delivered twice."""
    got = {}
    with stoker.Client(c.url, stall_timeout=10) as client:
        try:
            while True:
                b = client.next_batch(batch_size)
                tok, labels = b["tokens"], b["label"]
                assert isinstance(tok, stoker.Ragged) and tok.values.dtype == np.int32
                for i, key in enumerate(zip(*b.identities())):
                    key = (int(key[0]), int(key[1]))
                    assert key not in got, "example %r delivered twice" % (key,)
                    got[key] = (np.array(tok[i]), int(labels.reshape(-1)[i]))
                b.release()
        except stoker.SupplyEnded:
            pass
        fields = client.fields
    for p in producers:
        _, err = p.communicate(timeout=10)
        assert p.returncode == 0, err
    assert len(got) == n_each * len(producers), len(got)
    st = stoker.status(c.url)["counters"]
    assert st["produced"] == st["acknowledged"] == len(got), st
    return got, fields


def tokens_run(lengths, n, *extra, producers=1, name="t"):
    with Cluster() as c:
        ps = [c.producer("--workload", "tokens", "--lengths", lengths, "--max-examples", str(n),
                         *extra, name="%s%d" % (name, k), stderr=subprocess.PIPE, text=True)
              for k in range(producers)]
        return collect(c, ps, n)


def check_values(got, cap, vocab):
    for tokens, label in got.values():
        assert 1 <= len(tokens) <= cap, len(tokens)
        assert tokens.min() >= 0 and tokens.max() < vocab
        even = int((tokens % 2 == 0).sum())
        assert label == (1 if 2 * even > len(tokens) else 0)


def test_lognormal_lengths_mean_and_cap_exactly_once():
    n, mean, cap = 3000, 64, 200
    got, fields = tokens_run("lognormal:%d:%d" % (mean, cap), n, "--vocab", "1000", producers=2)
    assert fields[0] == stoker.Field("tokens", "int32", (None,), cap), fields
    assert fields[1].name == "label" and fields[1].dtype == "int64"
    check_values(got, cap, 1000)
    lengths = np.array([len(t) for t, _ in got.values()])
    # Log-normal with mean 64 and sigma 1, rounded and cut at 200: the draws' mean is 57.4 (5 %
    # of them are cut to the cap); the standard error of 6000 draws is 0.7.
    assert 55 <= lengths.mean() <= 60, lengths.mean()
    assert 0.03 < (lengths == cap).mean() < 0.07, (lengths == cap).mean()
    assert lengths.max() == cap  # the few longer draws are cut to the cap, never past it
    assert 30 < np.median(lengths) < 45, np.median(lengths)  # exp(mu) = 64 / e^0.5 = 38.8


def test_uniform_and_fixed_lengths():
    got, fields = tokens_run("uniform:3:9", 500)
    assert fields[0].max_len == 9
    lengths = sorted({len(t) for t, _ in got.values()})
    assert lengths == list(range(3, 10)), lengths
    check_values(got, 9, 50257)
    got, fields = tokens_run("fixed:17", 200, "--vocab", "2")
    assert fields[0].max_len == 17 and {len(t) for t, _ in got.values()} == {17}
    check_values(got, 17, 2)
    assert {int(v) for t, _ in got.values() for v in t} == {0, 1}


def test_values_follow_from_the_seed_and_name():
    def by_seq(got):
        return {seq: (t.tobytes(), lab) for (_, seq), (t, lab) in got.items()}

    a = by_seq(tokens_run("lognormal:32:128", 400, "--seed", "7")[0])
    b = by_seq(tokens_run("lognormal:32:128", 400, "--seed", "7")[0])
    other = by_seq(tokens_run("lognormal:32:128", 400, "--seed", "8")[0])
    assert a == b
    same = sum(a[s] == other[s] for s in a)
    assert same < 10, "seed 8 made %d of 400 examples equal to seed 7's" % same


def test_bad_lengths_are_named():
    for args, msg in (
            (["--workload", "tokens", "--lengths", "uniform:9:3"], "MIN 9 is above MAX 3"),
            (["--workload", "tokens", "--lengths", "lognormal:0:10"], "MEAN '0'"),
            (["--workload", "tokens", "--lengths", "gamma:3"],
             "expected fixed:N, uniform:MIN:MAX or lognormal:MEAN:CAP[:SIGMA]"),
            (["--lengths", "fixed:3"], "--lengths and --vocab need --workload tokens"),
            (["--generator", "exec", "--exec", "true", "--schema", "a:int32[1]", "--workload",
              "tokens"], "--workload applies to --generator synthetic only")):
        p = subprocess.run([PRODUCER, "--measure", "1"] + args, capture_output=True, text=True,
                           timeout=10)
        assert p.returncode == 2 and msg in p.stderr, (args, p.returncode, p.stderr)


def test_measure_and_a_dataset():
    p = subprocess.run([PRODUCER, "--workload", "tokens", "--lengths", "fixed:8", "--measure",
                        "1000"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and '"examples": 1000' in p.stdout, p.stdout + p.stderr
    with Cluster("--dataset-size", "50", "--epochs", "2") as c:
        c.producer("--workload", "tokens", "--lengths", "uniform:1:20", "--items", "50")
        seen = []
        with stoker.Client(c.url, stall_timeout=10) as client:
            for epoch in client.epochs(2, batch_size=16):
                items = []
                for b in epoch:
                    items += [int(i) for i in b.epoch_indices()[1]]
                    assert all(1 <= n <= 20 for n in b["tokens"].lengths())
                assert sorted(items) == list(range(50)), sorted(items)
                seen.append(items)
    assert len(seen) == 2


run(globals())
