"""Exceptions carry the broker's reason, once: a pull the broker refuses
(a batch larger than it allows) raises StokerError with the broker's words, not only a log line;
Stalled and SupplyEnded say their word once, so docs/python.md's `print("stalled:", e.reason)`
prints "stalled: no batch ..." and str(e) says it too."""

from helpers import Cluster, require, run

require("numpy")
import stoker  # noqa: E402


def first_error(client, batch_size):
    try:
        for _ in client.batches(batch_size):
            pass
    except stoker.StokerError as e:
        return e
    raise AssertionError("batches() ended without an exception")


def test_a_refused_pull_raises_the_brokers_reason():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "4")
        c.wait_producers(1)
        with stoker.Client(c.url, stall_timeout=4.0) as client:
            e = first_error(client, 2_000_000)
        assert type(e) is stoker.StokerError, repr(e)
        assert e.name == "invalid", e.name
        assert "pull of 2000000 examples: must be 1..1048576" in e.reason, e.reason
        assert str(e).count("must be 1..") == 1, str(e)


def test_stalled_says_stalled_once():
    with Cluster() as c:
        c.producer("--delay", "30:30")  # alive, and no example for 30 s
        c.wait_producers(1)
        with stoker.Client(c.url, stall_timeout=0.5, batch_size=4) as client:
            e = first_error(client, 4)
        assert isinstance(e, stoker.Stalled), repr(e)
        assert not e.reason.startswith("stalled"), e.reason
        assert "no batch within 0.5 s" in e.reason, e.reason
        assert str(e).count("stalled") == 1 and str(e).startswith("stalled: "), str(e)


def test_supply_ended_says_it_once():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--max-examples", "8")
        c.wait_producers(1)
        with stoker.Client(c.url, stall_timeout=4.0) as client:
            e = first_error(client, 4)
        assert isinstance(e, stoker.SupplyEnded) and e.finished, repr(e)
        assert "supply ended" not in e.reason, e.reason
        assert "every producer finished" in e.reason and "p1" in e.reason, e.reason
        assert str(e).count("supply ended") == 1, str(e)


run(globals())
