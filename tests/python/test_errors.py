"""Exceptions carry the broker's reason, once: a pull the broker refuses
(a batch larger than it allows) raises StokerError with the broker's words, not only a log line;
Stalled and SupplyEnded say their word once, so docs/python.md's `print("stalled:", e.reason)`
prints "stalled: no batch ..." and str(e) says it too. A bad job name (docs/sharing.md) is refused
naming it, by Client and by the library; a state_dict of another job is refused naming both."""

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


def test_a_bad_job_name_is_refused_naming_it():
    # A job's name (docs/sharing.md) is 1..63 bytes; None is the default job.
    for job, words in (("", "job='' is 0 bytes"), ("j" * 64, "is 64 bytes"),
                       ("é" * 32, "is 64 bytes"), (7, "job=7: give the job's name as a string")):
        try:
            stoker.Client("ipc:///nowhere", job=job)
            raise AssertionError("job=%r accepted" % (job,))
        except ValueError as e:
            assert words in str(e), (job, str(e))
    assert stoker.Client("ipc:///nowhere", job="j" * 63).job == "j" * 63
    assert stoker.Client("ipc:///nowhere").job is None
    # The library checks it too: the name reaches stoker_consumer_options.job (its last field).
    client = stoker.Client("ipc:///nowhere", job="ok", stall_timeout=1.0)
    client.job = "k" * 70
    try:
        client.next_batch(4)
        raise AssertionError("a 70-byte job reached the broker")
    except stoker.StokerError as e:
        assert "job '%s...' is 70 bytes" % ("k" * 64) in str(e), str(e)


def test_a_state_of_another_job_is_refused_naming_both():
    a = stoker.Client("ipc:///nowhere", job="train-a")
    state = a.state_dict()
    assert state["job"] == "train-a", state
    stoker.Client("ipc:///nowhere", job="train-a").load_state_dict(state)
    for other, words in ((stoker.Client("ipc:///nowhere", job="train-b"),
                          "of job 'train-a'; this client is of job 'train-b'"),
                         (stoker.Client("ipc:///nowhere"),
                          "of job 'train-a'; this client is of the default job")):
        try:
            other.load_state_dict(state)
            raise AssertionError("another job's state accepted")
        except ValueError as e:
            assert words in str(e), str(e)
    # A state of the default job (no "job" key, as before jobs) in a named job.
    default = stoker.Client("ipc:///nowhere").state_dict()
    assert "job" not in default, default
    try:
        stoker.Client("ipc:///nowhere", job="train-a").load_state_dict(default)
        raise AssertionError("the default job's state accepted by job 'train-a'")
    except ValueError as e:
        assert "of the default job; this client is of job 'train-a'" in str(e), str(e)


run(globals())
