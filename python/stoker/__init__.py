"""stoker: feed your own training loop from a stoker broker.

    import stoker
    with stoker.Client("tcp://gpu-host:7070") as client:
        for batch in client.batches(64):      # dict: field name -> numpy array (no copy)
            train_step(batch["input"], batch["output"])

Each batch is acknowledged when the loop asks for the next one, and the last one when the loop
is left (break, the end of the data), unless an exception ends the `with` block: then the broker
redelivers it to another consumer (Client.batches tells the whole rule). When the data supply
ends the loop raises stoker.SupplyEnded; when nothing arrives within the stall timeout,
stoker.Stalled (both stoker.StokerError, with the broker's reason). A tls+tcp:// broker takes
tls_ca= (and tls_cert=/tls_key= for client certificates); a TLS failure raises stoker.TLSError. Data-parallel ranks
(torchrun) pass group="NAME": equal steps, one common end, stoker.GroupBroken when a rank is
lost. For PyTorch's DataLoader see
stoker.torch.StokerIterableDataset. `python -m stoker.status URL` prints a broker's status.

Pure Python over libstoker.so (ctypes); numpy and torch are used when installed.
"""

from ._lib import API_VERSION
from .client import (Batch, BrokerRestarted, Client, Event, Field, GroupBroken, Ragged, Run,
                     Stalled, StokerError, SupplyEnded, TLSError, status)
from . import ragged  # noqa: F401  (stoker.ragged.pad / pack / nested; numpy or torch on use)

__all__ = ["API_VERSION", "Batch", "BrokerRestarted", "Client", "Event", "Field", "GroupBroken", "Ragged", "Run",
           "Stalled", "StokerError", "SupplyEnded", "TLSError", "status", "library_api_version",
           "__version__"]


def __getattr__(name):
    # stoker.__version__ is the project's one version (meson.build's), read from the library it
    # was built with (stoker_version()) when first asked, so importing loads nothing.
    if name == "__version__":
        from . import _lib
        return _lib.load().stoker_version().decode()
    raise AttributeError("module 'stoker' has no attribute %r" % name)


def library_api_version():
    """STOKER_API_VERSION of the loaded libstoker.so."""
    from . import _lib
    return _lib.load().stoker_consumer_api_version()
