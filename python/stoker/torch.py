"""stoker.torch: a stoker feed as a PyTorch IterableDataset, and a batch as tensors.

    from stoker.torch import StokerIterableDataset
    feed = StokerIterableDataset("tcp://gpu-host:7070", batch_size=64)
    loader = torch.utils.data.DataLoader(feed, batch_size=None, pin_memory=True)
    with feed:                                # an exception here gives the last batch back
        for batch in loader:                  # dict: field name -> tensor
            ...

The dataset yields whole batches (the broker collates them), so give the DataLoader
batch_size=None. Producers are the parallel workers: num_workers=0 is the usual choice. Each
iterator has its own connection (a consumer of the broker), so with num_workers > 0 every worker
is a separate consumer (the broker hands each its own batches); nng is not fork-safe, so then
use multiprocessing_context="spawn" unless the parent never used stoker.
Tensors are made with torch.from_numpy over the received message and own a reference to it:
they stay valid after the batch is acknowledged, however long you keep them (copy=True gives
independent, resizable copies instead).

With stoker.Client, tensors(batch) turns a batch into the same dict of tensors:

    from stoker.torch import tensors
    for batch in client.batches(64):
        t = tensors(batch)                    # dict: field name -> tensor, no copy
        loss = loss_fn(model(t["input"]), t["output"])

Use it rather than torch.from_numpy(batch[...]) directly: on the broker's host a batch's arrays
are read-only views of the broker's shared memory, and torch.from_numpy warns about every
read-only array ("The given NumPy array is not writable"); tensors() gives the same zero-copy
tensors without the warning (they must not be written in place; copy=True gives writable ones).
It does not own the acknowledgement rules (stoker.Client.batches does) nor the broker's
counters (stoker.status).
"""

import os
import warnings

import torch
import torch.utils.data

from .client import Client, Ragged, SupplyEnded, status

__all__ = ["StokerIterableDataset", "tensors"]


def tensors(batch, fields=None, copy=False):
    """A batch (stoker.Batch, or any dict of numpy arrays) as a dict from field name to
    torch.Tensor, in the batch's field order or in the order of fields (names) when given.

    No copy: each tensor shares the batch's memory and keeps it alive, so it stays valid after
    the batch is released. On the broker's host that memory is the broker's shared memory,
    mapped read-only (Batch.shared): torch cannot mark a tensor read-only, so writing into one
    in place faults; copy=True gives independent, writable copies. Unlike torch.from_numpy on
    the arrays, it does not warn that they are not writable. A variable-length field comes as a
    stoker.Ragged of two tensors, its values and its int64 offsets (the layout
    torch.nested.nested_tensor_from_jagged takes), zero-copy as the others."""
    names = list(fields) if fields is not None else list(batch.keys())
    out = {}
    with warnings.catch_warnings():
        # torch warns about every read-only array (a batch in the broker's shared memory); the
        # docstring says what that means for the tensors.
        warnings.filterwarnings("ignore", message=".*not writable", category=UserWarning)
        for k in names:
            v = batch[k]
            if isinstance(v, Ragged):  # a variable-length field: its values and offsets
                values = v.values if isinstance(v.values, torch.Tensor) else \
                    torch.from_numpy(v.values)
                offsets = torch.from_numpy(v.offsets)
                out[k] = Ragged(values.clone() if copy else values,
                                offsets.clone() if copy else offsets)
                continue
            t = v if isinstance(v, torch.Tensor) else torch.from_numpy(v)  # bfloat16: a tensor
            out[k] = t.clone() if copy else t
    return out


class StokerIterableDataset(torch.utils.data.IterableDataset):
    """Batches of batch_size examples from the broker at url, as dicts of tensors.

    Iteration ends with stoker.SupplyEnded or stoker.Stalled raised from the DataLoader loop
    (stop_on_supply_end=True ends it quietly on SupplyEnded instead), or after max_batches.
    fields selects and orders the fields to yield (default: all). on_event receives
    stoker.Event for producers joining, lost, finishing; without it they are kept for events().

    Acknowledgement: each batch is acknowledged when the loop asks for the next one, and the
    last one when the loop is left (break, the loader's iterator closed, the end of the data).
    An exception in your loop reaches the dataset as the same closing of its iterator, so to
    have a failed step's batch given back to the broker (redelivered to another consumer), run
    the loop inside `with dataset:`; when that block ends with an exception the batch the loop
    held is not acknowledged; when it ends normally it is. With num_workers > 0 each worker
    acknowledges what it handed to the DataLoader when the DataLoader shuts it down (break,
    exception or end alike: a worker cannot see your loop).

    duplicates(), events() and status() give what stoker.Client gives, for the consumers this
    process opened (all of them with num_workers=0; with workers, each worker's are its own).

    tls_ca, tls_cert, tls_key and tls_insecure are stoker.Client's, for a tls+tcp:// url.

    group (with rank and world_size, which default to torchrun's RANK and WORLD_SIZE) makes each
    DDP rank one rank of a stoker group: equal steps, one common end (use it with num_workers=0:
    one client per rank).

    job names the training job (docs/sharing.md): jobs share the broker's producers, each gets
    every example once; every worker and rank of one job names the same job.
    """

    def __init__(self, url, batch_size, token_file=None, prefetch=None, stall_timeout=None, *,
                 fields=None, max_batches=None, stop_on_supply_end=False, on_event=None,
                 copy=False, name=None, group=None, rank=None, world_size=None, tls_ca=None,
                 tls_cert=None, tls_key=None, tls_insecure=False, job=None):
        super().__init__()
        self.group, self.rank, self.world_size = group, rank, world_size
        self.job = job
        # As stoker.Client's (checked when a client connects): a tls+tcp:// url needs tls_ca.
        self.tls = dict(tls_ca=tls_ca, tls_cert=tls_cert, tls_key=tls_key,
                        tls_insecure=tls_insecure)
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
        self._reset()

    def _reset(self):
        self._pid = os.getpid()
        self._clients = []  # open clients of this process, not iterating: [client, busy]
        self._blocks = 0  # open `with dataset:` blocks
        self._duplicates = 0  # of clients closed already
        self._events = []

    def _mine(self):
        # A forked or unpickled copy in a worker starts with no clients of its own.
        if getattr(self, "_pid", None) != os.getpid():
            self._reset()

    def __getstate__(self):  # workers get the settings, not the connections
        state = dict(self.__dict__)
        for k in ("_pid", "_clients", "_blocks", "_duplicates", "_events"):
            state.pop(k, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._reset()

    def _tensors(self, batch):
        return tensors(batch, self.fields, self.copy)

    def _event(self, e):
        if self.on_event is not None:
            self.on_event(e)
        else:
            self._events.append(e)

    def _client(self):
        """An idle open client of this process (a new epoch goes on with it), or a new one."""
        for entry in self._clients:
            if not entry[1]:
                entry[1] = True
                return entry
        info = torch.utils.data.get_worker_info()
        name = self.name
        if name is None and info is not None:
            name = "torch-worker-%d" % info.id
        client = Client(self.url, self.token_file, self.prefetch, self.stall_timeout,
                        batch_size=self.batch_size, name=name, on_event=self._event, group=self.group,
                        rank=self.rank, world_size=self.world_size, job=self.job, **self.tls)
        entry = [client, True]
        self._clients.append(entry)
        return entry

    def _close(self, entry, acknowledge):
        if entry not in self._clients:  # closed already (close() while it was iterating)
            return
        self._clients.remove(entry)
        client = entry[0]
        client.close(acknowledge_held=acknowledge)
        self._duplicates += client.duplicates()

    def __iter__(self):
        self._mine()
        entry = self._client()
        client = entry[0]
        client._blocks = self._blocks  # inside `with dataset:`, its end decides
        ok = False
        try:
            for batch in client.batches(self.batch_size, self.max_batches):
                yield self._tensors(batch)
            ok = True
        except SupplyEnded:
            ok = True
            if not self.stop_on_supply_end:
                raise
        except GeneratorExit:
            ok = True  # the loop was left (break, or an exception: see the class)
            raise
        finally:
            entry[1] = False
            if self._blocks == 0:
                # Pull errors (Stalled, a lost broker) come with nothing held.
                self._close(entry, acknowledge=ok)

    def close(self, acknowledge_held=True):
        """Closes this process's consumers (as stoker.Client.close). Idempotent; iterating
        again opens a new one."""
        self._mine()
        for entry in list(self._clients):
            self._close(entry, acknowledge_held)

    def __enter__(self):
        self._mine()
        self._blocks += 1
        for client, _ in self._clients:
            client._blocks = self._blocks
        return self

    def __exit__(self, exc_type, exc, tb):
        self._blocks -= 1
        for client, _ in self._clients:
            client._blocks = self._blocks
        if self._blocks == 0:
            self.close(acknowledge_held=exc_type is None)
        return False

    def duplicates(self):
        """Examples that came a second time to this process's consumers and were dropped before
        the DataLoader saw them (0 unless delivery broke its guarantee); see
        stoker.Client.duplicates."""
        self._mine()
        return self._duplicates + sum(c.duplicates() for c, _ in self._clients)

    def events(self):
        """Events (stoker.Event) not yet returned, when no on_event callback was given."""
        self._mine()
        out, self._events = self._events, []
        return out

    def status(self, timeout=3.0):
        """The broker's status as a dict (see stoker.Client.status): all its consumers' and
        producers' counters, whichever process asks."""
        self._mine()
        for client, _ in self._clients:
            return client.status(timeout)
        return Client(self.url, self.token_file, **self.tls).status(timeout)
