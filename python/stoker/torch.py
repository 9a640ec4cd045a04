"""stoker.torch: a stoker feed as a PyTorch IterableDataset.

    from stoker.torch import StokerIterableDataset
    ds = StokerIterableDataset("tcp://gpu-host:7070", batch_size=64)
    loader = torch.utils.data.DataLoader(ds, batch_size=None, pin_memory=True)
    for batch in loader:                      # dict: field name -> tensor
        ...

The dataset yields whole batches (the broker collates them), so give the DataLoader
batch_size=None. Producers are the parallel workers: num_workers=0 is the usual choice. Each
iterator opens its own connection, so with num_workers > 0 every worker is a separate consumer
(the broker hands each its own batches); nng is not fork-safe, so then use
multiprocessing_context="spawn" unless the parent never used stoker.
Tensors are made with torch.from_numpy over the received message and own a reference to it:
they stay valid after the batch is acknowledged, however long you keep them (copy=True gives
independent, resizable copies instead).
"""

import torch
import torch.utils.data

from .client import Client


class StokerIterableDataset(torch.utils.data.IterableDataset):
    """Batches of batch_size examples from the broker at url, as dicts of tensors.

    Iteration ends with stoker.SupplyEnded or stoker.Stalled raised from the DataLoader loop
    (stop_on_supply_end=True ends it quietly on SupplyEnded instead), or after max_batches.
    fields selects and orders the fields to yield (default: all). on_event receives
    stoker.Event for producers joining, lost, finishing. Each batch is acknowledged when the
    next is requested. group (with rank and world_size, which default to torchrun's RANK and
    WORLD_SIZE) makes each DDP rank one rank of a stoker group: equal steps, one common end
    (use it with num_workers=0: one client per rank)."""

    def __init__(self, url, batch_size, token_file=None, prefetch=None, stall_timeout=None, *,
                 fields=None, max_batches=None, stop_on_supply_end=False, on_event=None,
                 copy=False, name=None, group=None, rank=None, world_size=None):
        super().__init__()
        self.group, self.rank, self.world_size = group, rank, world_size
        self.url = url
        self.batch_size = int(batch_size)
        self.token_file = token_file
        self.prefetch = prefetch
        self.stall_timeout = stall_timeout
        self.fields = list(fields) if fields is not None else None
        self.max_batches = max_batches
        self.stop_on_supply_end = stop_on_supply_end
        self.on_event = on_event
        self.copy = copy
        self.name = name

    def _tensors(self, batch):
        names = self.fields if self.fields is not None else list(batch.keys())
        out = {}
        for k in names:
            t = torch.from_numpy(batch[k])
            out[k] = t.clone() if self.copy else t
        return out

    def __iter__(self):
        from .client import SupplyEnded
        info = torch.utils.data.get_worker_info()
        name = self.name
        if name is None and info is not None:
            name = "torch-worker-%d" % info.id
        with Client(self.url, self.token_file, self.prefetch, self.stall_timeout,
                    batch_size=self.batch_size, name=name, on_event=self.on_event,
                    group=self.group, rank=self.rank, world_size=self.world_size) as client:
            try:
                for batch in client.batches(self.batch_size, self.max_batches):
                    yield self._tensors(batch)
            except SupplyEnded:
                if not self.stop_on_supply_end:
                    raise
