"""When a loop's batches are acknowledged: leaving a loop normally (break, the generator or the
DataLoader's iterator closed) acknowledges the batch it was on; an exception that ends the
Client's or the dataset's `with` block gives it back, and the broker redelivers it to the next
consumer. Each test: one producer with 40 examples, batches of 4, a few trained; then a second
consumer drains the rest and must never see a trained example again."""

import gc
import time

from helpers import Cluster, require, run

np = require("numpy")
torch = require("torch")
import stoker  # noqa: E402
from stoker.torch import StokerIterableDataset  # noqa: E402

TOTAL = 40


def cluster():
    c = Cluster()
    c.producer("--delay", "0:0", "--chunk", "4", "--max-examples", str(TOTAL))
    return c


def counters_when(url, acknowledged):
    """The broker's counters once acknowledged reaches the given number (acknowledgements
    travel with requests the broker may handle after a status request), or after 3 s."""
    deadline = time.monotonic() + 3
    while True:
        st = stoker.status(url)["counters"]
        if st["acknowledged"] >= acknowledged or time.monotonic() > deadline:
            return st
        time.sleep(0.01)


def rows(inputs):
    return {bytes(np.ascontiguousarray(r).tobytes()) for r in inputs}


def drain(url):
    """Every example a second consumer gets until the supply ends, as a set of input rows."""
    got = []
    with stoker.Client(url, batch_size=4, stall_timeout=3) as client:
        try:
            for batch in client.batches():
                got.extend(batch["input"].copy())
        except stoker.SupplyEnded as e:
            assert e.finished, e.reason
    assert len(rows(got)) == len(got)
    return rows(got)


def assert_trained_only_once(url, trained, acknowledged):
    st = counters_when(url, acknowledged)
    assert st["acknowledged"] == acknowledged and st["in_flight"] == 0, st
    rest = drain(url)
    assert not rest & trained, "%d trained examples came again" % len(rest & trained)
    assert len(rest) + len(trained) == TOTAL, (len(rest), len(trained))


def train_three_then_break(url):
    trained = []
    for i, batch in enumerate(stoker.Client(url, batch_size=4).batches()):
        trained.extend(batch["input"].copy())
        if i == 2:
            break
    return trained


def test_break_out_of_a_client_loop_acknowledges_the_last_batch():
    with cluster() as c:
        trained = train_three_then_break(c.url)
        gc.collect()  # the client is gone (its last batch with it): its leases went back
        assert_trained_only_once(c.url, rows(trained), 12)


def test_break_out_of_a_client_loop_tells_the_broker_at_once():
    with cluster() as c:
        client = stoker.Client(c.url, batch_size=4)
        for i, batch in enumerate(client.batches()):
            if i == 2:
                break
        # Still open and holding its last batch: the acknowledgements went out anyway.
        st = counters_when(c.url, 12)
        assert st["acknowledged"] == 12, st
        assert batch.released
        client.close()
        assert stoker.status(c.url)["counters"]["in_flight"] == 0


def test_break_inside_a_client_with_block_acknowledges_when_the_block_ends():
    with cluster() as c:
        trained = []
        with stoker.Client(c.url, batch_size=4) as client:
            for i, batch in enumerate(client.batches()):
                trained.extend(batch["input"].copy())
                if i == 2:
                    break
        assert_trained_only_once(c.url, rows(trained), 12)


def test_exception_in_a_client_with_block_gives_the_batch_back():
    with cluster() as c:
        trained, failed = [], []
        try:
            with stoker.Client(c.url, batch_size=4) as client:
                for i, batch in enumerate(client.batches()):
                    if i == 2:
                        failed.extend(batch["input"].copy())
                        raise RuntimeError("training step failed")
                    trained.extend(batch["input"].copy())
        except RuntimeError:
            pass
        assert_trained_only_once(c.url, rows(trained), 8)
        # (assert_trained_only_once drained the rest: the failed batch was among it)


def test_exception_in_a_client_with_block_batch_reaches_the_next_consumer():
    with cluster() as c:
        failed = []
        try:
            with stoker.Client(c.url, batch_size=4) as client:
                for batch in client.batches():
                    failed.extend(batch["input"].copy())
                    raise RuntimeError("training step failed")
        except RuntimeError:
            pass
        rest = drain(c.url)
        assert rows(failed) <= rest and len(rest) == TOTAL


def loader_of(feed, workers=0):
    if workers == 0:
        return torch.utils.data.DataLoader(feed, batch_size=None)
    return torch.utils.data.DataLoader(feed, batch_size=None, num_workers=workers,
                                       multiprocessing_context="spawn")


def test_break_out_of_a_dataloader_loop_acknowledges_the_last_batch():
    with cluster() as c:
        feed = StokerIterableDataset(c.url, batch_size=4)
        trained = []
        for i, batch in enumerate(loader_of(feed)):  # the README's loop
            trained.extend(batch["input"].numpy().copy())
            if i == 2:
                break
        assert_trained_only_once(c.url, rows(trained), 12)
        assert feed.duplicates() == 0


def test_exception_in_a_with_dataset_block_gives_the_batch_back():
    with cluster() as c:
        feed = StokerIterableDataset(c.url, batch_size=4)
        trained, failed = [], []
        try:
            with feed:
                for i, batch in enumerate(loader_of(feed)):
                    if i == 2:
                        failed.extend(batch["input"].numpy().copy())
                        raise RuntimeError("training step failed")
                    trained.extend(batch["input"].numpy().copy())
        except RuntimeError:
            pass
        st = counters_when(c.url, 8)
        assert st["acknowledged"] == 8 and st["in_flight"] == 0, st
        rest = drain(c.url)
        assert rows(failed) <= rest, "the failed batch was not redelivered"
        assert not rest & rows(trained) and len(rest) + len(trained) == TOTAL


def test_break_inside_a_with_dataset_block_acknowledges_and_epochs_share_a_consumer():
    with cluster() as c:
        feed = StokerIterableDataset(c.url, batch_size=4)
        trained = []
        with feed:
            for epoch in range(2):
                for i, batch in enumerate(loader_of(feed)):
                    trained.extend(batch["input"].numpy().copy())
                    if i == 1:
                        break
            assert len(feed._clients) == 1, "the second epoch went on with the first's consumer"
        assert feed._clients == []
        assert_trained_only_once(c.url, rows(trained), 16)


def test_break_out_of_a_dataloader_loop_with_workers_acknowledges_what_they_handed_out():
    with cluster() as c:
        feed = StokerIterableDataset(c.url, batch_size=4)
        trained = []
        for i, batch in enumerate(loader_of(feed, workers=1)):
            trained.extend(batch["input"].numpy().copy())
            if i == 2:
                break
        # The worker may have handed more batches to the DataLoader than the loop took (its
        # prefetch): those are acknowledged too, and only the trained ones are checked.
        st = counters_when(c.url, 12)
        assert st["acknowledged"] >= 12 and st["acknowledged"] % 4 == 0, st
        assert st["in_flight"] == 0, st
        rest = drain(c.url)
        assert not rest & rows(trained)
        assert len(rest) + st["acknowledged"] == TOTAL, (len(rest), st)


if __name__ == "__main__":  # spawned DataLoader workers import this file too
    run(globals())
