"""A PyTorch loop trains from a real broker through stoker.torch.StokerIterableDataset and
torch.utils.data.DataLoader(batch_size=None, pin_memory=True): its loss falls. stoker.torch.tensors
gives a stoker.Client's batches as the same tensors, and the documented checkpoint loop gives
torch no warning about the read-only arrays of the broker's shared memory."""

import os
import re
import subprocess
import sys
import tempfile

from helpers import Cluster, require, run

torch = require("torch")
require("numpy")
import stoker  # noqa: E402
from stoker.torch import StokerIterableDataset, tensors  # noqa: E402

ROOT = os.environ.get("STOKER_SOURCE_ROOT",
                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))


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


def test_tensors_share_the_batch_and_copies_are_writable():
    with Cluster() as c:
        c.producer("--delay", "0:0", "--chunk", "8")
        with stoker.Client(c.url, batch_size=8, stall_timeout=10) as client:
            batch = client.next_batch()
            assert batch.shared, "on the broker's host a batch should be in shared memory"
            t = tensors(batch)
            assert list(t) == list(batch) == ["input", "output"]
            assert t["input"].shape == (8, 10) and t["input"].dtype == torch.float32
            assert t["input"].data_ptr() == batch["input"].ctypes.data  # no copy
            assert list(tensors(batch, fields=["output"])) == ["output"]
            copied = tensors(batch, copy=True)
            assert copied["input"].data_ptr() != batch["input"].ctypes.data
            assert torch.equal(copied["input"], t["input"])
            snapshot = t["input"].clone()
            copied["input"].add_(1.0)  # writable, and the batch is untouched
            assert torch.equal(t["input"], snapshot) and not torch.equal(copied["input"], snapshot)
            batch.release()


def _run_with_warnings_as_errors(code, url, tmp, name):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        # Every warning is an error: torch's "The given NumPy array is not writable" fails it.
        f.write("import warnings\nwarnings.simplefilter(\"error\")\n")
        f.write(code.replace("tcp://localhost:7070", url))
    return subprocess.run([sys.executable, path], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=180, cwd=tmp)


def test_the_checkpoint_example_gives_torch_no_warning_on_the_brokers_host():
    # docs/durability.md's loop (Client(commit=True), state_dict) against a broker on this host,
    # where batches are read-only views of its shared memory, with every warning an error; and
    # the pattern it replaced (torch.from_numpy on the arrays), which must fail the same way,
    # or this test would prove nothing. Each runs in a fresh interpreter: torch warns once per
    # process.
    with open(os.path.join(ROOT, "docs", "durability.md")) as f:
        found = [b for b in re.findall(r"^```python\n(.*?)^```", f.read(), re.S | re.M)
                 if "commit=True" in b]
    assert len(found) == 1, "docs/durability.md: no checkpoint example with commit=True"
    code = found[0]
    assert "tensors(batch)" in code and "from_numpy" not in code, code
    old = code.replace("t = tensors(batch)",
                       "t = {k: torch.from_numpy(v) for k, v in batch.items()}")
    assert old != code
    with Cluster() as c, tempfile.TemporaryDirectory(prefix="stoker-warn-") as tmp:
        for i in range(2):
            c.producer("--delay", "0:0", "--chunk", "64", "--seed", str(i + 1))
        p = _run_with_warnings_as_errors(code, c.url, tmp, "example.py")
        out = p.stdout.decode(errors="replace")
        print(out[-1500:])
        assert p.returncode == 0, "the documented example warned or failed:\n" + out
        assert os.path.exists(os.path.join(tmp, "ckpt.pt"))
        st = stoker.status(c.url)
        assert 0 < st["counters"]["acknowledged"] <= 300 * 64, st["counters"]
        assert st["counters"]["discrepancy"] == 0, st["counters"]
        assert any(e["delivery"] == "shm" for e in st["consumers"]), st["consumers"]
        p = _run_with_warnings_as_errors(old, c.url, tmp, "from_numpy.py")
        out = p.stdout.decode(errors="replace")
        assert p.returncode != 0 and "not writable" in out, out[-1500:]


run(globals())
