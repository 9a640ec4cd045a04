"""A PyTorch loop trains from a real broker through stoker.torch.StokerIterableDataset and
torch.utils.data.DataLoader(batch_size=None, pin_memory=True): its loss falls."""

from helpers import Cluster, require, run

torch = require("torch")
require("numpy")
import stoker  # noqa: E402
from stoker.torch import StokerIterableDataset  # noqa: E402


def test_pytorch_loop_trains_and_its_loss_falls():
    torch.manual_seed(0)
    with Cluster() as c:
        for i in range(2):
            c.producer("--delay", "0:0", "--chunk", "16", "--seed", str(i + 1))
        ds = StokerIterableDataset(c.url, batch_size=32, stall_timeout=5, max_batches=600)
        loader = torch.utils.data.DataLoader(ds, batch_size=None, pin_memory=True)
        model = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU(),
                                    torch.nn.Linear(32, 1))
        opt = torch.optim.Adam(model.parameters(), lr=1e-2)
        losses = []
        for batch in loader:
            x, y = batch["input"], batch["output"]
            assert x.shape == (32, 10) and y.shape == (32, 1) and x.dtype == torch.float32
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert len(losses) == 600
        first, last = sum(losses[:50]) / 50, sum(losses[-50:]) / 50
        print("loss: first 50 steps %.4f, last 50 steps %.4f" % (first, last))
        assert last < 0.5 * first, (first, last)
        assert stoker.status(c.url)["counters"]["discrepancy"] == 0


def test_tensors_outlive_their_batch_and_copies_are_independent():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "8")
        kept = []
        for copy in (False, True):
            ds = StokerIterableDataset(c.url, batch_size=8, max_batches=3, copy=copy)
            for batch in torch.utils.data.DataLoader(ds, batch_size=None):
                kept.append((batch["input"], batch["input"].clone()))
        import gc
        gc.collect()
        for t, snapshot in kept:  # the batches were acknowledged and the clients closed
            assert torch.equal(t, snapshot)
        assert len(kept) == 6


def test_supply_end_reaches_the_dataloader_loop():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "4", "--max-examples", "20")
        ds = StokerIterableDataset(c.url, batch_size=4, stall_timeout=3)
        n = 0
        try:
            for batch in torch.utils.data.DataLoader(ds, batch_size=None):
                n += batch["input"].shape[0]
            raise AssertionError("no SupplyEnded")
        except stoker.SupplyEnded as e:
            assert e.finished
        assert n == 20
        quiet = StokerIterableDataset(c.url, batch_size=4, stall_timeout=3,
                                      stop_on_supply_end=True)
        assert list(torch.utils.data.DataLoader(quiet, batch_size=None)) == []


def test_dataset_gives_duplicates_events_and_status_like_the_client():
    with Cluster() as c:
        ds = StokerIterableDataset(c.url, batch_size=4, stall_timeout=3, stop_on_supply_end=True)
        assert ds.status()["counters"]["produced"] == 0  # before any consumer connected
        # Slow enough that the producer finishes while the dataset's consumer listens.
        c.producer("--delay", "0.01:0.01", "--chunk", "4", "--max-examples", "40")
        got = sum(b["input"].shape[0] for b in torch.utils.data.DataLoader(ds, batch_size=None))
        assert got == 40
        assert ds.duplicates() == 0 and isinstance(ds.duplicates(), int)
        events = ds.events()
        assert ("producer_finished", "p1") in [(e.kind, e.name) for e in events], events
        assert ds.events() == []  # returned once
        st = ds.status()
        assert st["counters"]["acknowledged"] == 40 and st["counters"]["in_flight"] == 0, st
        assert [p["name"] for p in st["producers"]] == ["p1"]


run(globals())
