"""Datasets from Python (docs/datasets.md): `for epoch in client.epochs(E)` yields E epochs, each
iterating its batches until the broker says the epoch's last item was delivered; every index comes
exactly once per epoch (Batch.epoch_indices()), also in strict mode where no batch mixes epochs; a stream
broker's batches carry no items."""

import signal

from helpers import Cluster, require, run

require("numpy")
import numpy as np  # noqa: E402
import stoker  # noqa: E402

N = 400


def test_epochs_yield_every_index_once_per_epoch():
    with Cluster("--dataset-size", str(N), "--epochs", "3", "--shuffle-seed", "4") as c:
        for _ in range(3):
            c.producer("--items", str(N), "--delay", "0:0.0005", "--chunk", "8")
        c.wait_producers(3)
        per_epoch = {}
        with stoker.Client(c.url, stall_timeout=10) as client:
            for epoch in client.epochs(3, batch_size=16):
                for batch in epoch:
                    ep, idx = batch.epoch_indices()
                    for e, i in zip(ep.tolist(), idx.tolist()):
                        per_epoch.setdefault(e, []).append(i)
                assert client._epochs_ended() == epoch.number + 1
            assert client.duplicates() == 0
        assert sorted(per_epoch) == [0, 1, 2]
        for e, items in per_epoch.items():
            assert sorted(items) == list(range(N)), "epoch %d: %d items" % (e, len(items))
        # The epochs are different permutations of the dataset.
        assert per_epoch[0] != per_epoch[1]


def test_strict_epochs_never_mix_and_survive_a_killed_producer():
    with Cluster("--dataset-size", str(N), "--epochs", "2", "--strict-epochs",
                 "--producer-timeout", "0.5") as c:
        for _ in range(3):
            c.producer("--items", str(N), "--delay", "0.0005:0.001", "--chunk", "4")
        c.wait_producers(3)
        with stoker.Client(c.url, stall_timeout=10) as client:
            killed = False
            for epoch in client.epochs(2, batch_size=8):
                items = []
                for batch in epoch:
                    ep, idx = batch.epoch_indices()
                    assert (ep == epoch.number).all(), "strict epochs mixed %s" % set(ep)
                    items += idx.tolist()
                    if not killed and len(items) > N // 3:
                        c.producers[0].send_signal(signal.SIGKILL)
                        killed = True
                assert sorted(items) == list(range(N)), "epoch %d: %d items" % (
                    epoch.number, len(items))
            assert killed


def test_a_stream_batch_carries_no_items():
    with Cluster() as c:
        c.producer("--delay", "0:0")
        c.wait_producers(1)
        with stoker.Client(c.url, stall_timeout=10) as client:
            b = client.next_batch(4)
            ep, idx = b.epoch_indices()
            assert len(ep) == 0 and len(idx) == 0
            b.release()
        assert stoker.status(c.url)["mode"] == "streams"


if __name__ == "__main__":
    run(globals())
