#!/usr/bin/python3
"""One side of `bench.py --only ragged`: token sequences of log-normal lengths (mean 512, cap
4096) into a PyTorch loop that receives each batch as a padded torch tensor, from a stoker broker
(stoker.Client) or from a PyTorch DataLoader whose workers draw the same sequences with numpy.
Prints one JSON line: real tokens per second (padding not counted), examples per second, the
padding fraction (padded slots / all slots of the tensors the loop got) and batches.

    /usr/bin/python3 bench/ragged_loop.py stoker URL SECONDS MODE
    /usr/bin/python3 bench/ragged_loop.py dataloader WORKERS SECONDS

MODE is one entry of MODES below (how the broker batches); a mode this stoker's Client does not
take yet prints {"skipped": ...} and exits 0. Measures from the end of the first second
(connections, workers' start) for SECONDS.

The same data on both sides: the DataLoader's IterableDataset (TokenSequences) draws each
length as `stoker-producer --workload tokens --lengths lognormal:512:4096` does (log-normal with
mean 512 and log-space sigma 1, rounded, at least 1, cut to 4096; common/runtime/synthetic.c)
and its tokens uniform in [0, VOCAB) as int32, with the same label (1 when more tokens are even
than odd); each example costs one vectorised numpy call for its tokens, the cheapest Python can
make it, as the C producer's cost is a loop over its tokens: neither side simulates extra work
(the producers run --delay 0:0, the default of the tokens workload). Both loops then hand the
model the same thing: a (batch, longest) int32 tensor padded with 0, its lengths and labels;
the DataLoader pads in its workers (collate_fn), stoker in the loop (Ragged.pad), so stoker's
side pays its padding on the training process's core.
"""
import inspect
import json
import math
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.join(ROOT, os.environ.get("STOKER_BUILD", "build"))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ.setdefault("STOKER_LIB", os.path.join(BUILD, "common", "libstoker.so"))

BATCH = 32          # sequences per batch (count batching; rows with pack=)
MEAN, CAP, SIGMA = 512, 4096, 1.0
VOCAB = 50257
PACK_ROW = 2048
WARMUP_S = 1.0
LENGTHS = "lognormal:%d:%d:%g" % (MEAN, CAP, SIGMA)  # the producers' --lengths (bench.py reads it)

# How the broker batches: (name, Client kwargs, what the loop does with a batch). A mode runs
# only when stoker.Client takes its kwargs; the others print "skipped: ...". Each is one entry.
MODES = [
    # batch_size sequences, padded to the batch's longest.
    ("count", {}, "pad"),
    # (Client(max_tokens=, buckets=, pack=), API version 3); a stoker without
    # them skips these. Batches of sequences of similar length from what the queues hold.
    ("buckets", {"buckets": True}, "pad"),
    # Rows of exactly PACK_ROW tokens (batch_size counts rows), sequences end to end, a
    # sequence split across rows (split=True): the loop lays them out as input_ids /
    # position_ids / cu_seqlens (stoker.ragged.pack(r, row=PACK_ROW)).
    ("packed", {"pack": PACK_ROW}, "pack"),
]


def lognormal_mu():
    return math.log(MEAN) - SIGMA * SIGMA / 2  # mean = exp(mu + sigma^2 / 2)


def padded_batch(r):
    """The (batch, longest) tensor, lengths; real tokens and slots."""
    import torch
    padded, lengths = r.pad(pad_value=0)
    x = torch.from_numpy(padded)
    return x, lengths, int(r.offsets[-1]), x.numel()


def packed_slots(r):
    """A Client(pack=PACK_ROW) batch laid out as its rows (stoker.ragged.pack(row=)): input_ids and
    position_ids (rows, PACK_ROW), cu_seqlens; real tokens and the rows' slots (each row's
    unused tail is its padding)."""
    import torch
    import stoker.ragged
    p = stoker.ragged.pack(r, row=PACK_ROW)  # (Ragged.pack() takes no row= yet)
    ids = torch.from_numpy(p.input_ids)
    return ids, p.cu_seqlens, int(r.offsets[-1]), ids.numel()


def measure(batches, seconds, take):
    """tokens/s, examples/s, padding fraction over `seconds` after WARMUP_S; take(batch) gives
    (real tokens, slots, examples) after touching what the model would get."""
    start = time.monotonic()
    t0, real, slots, examples, n = None, 0, 0, 0, 0
    for b in batches:
        r_real, r_slots, r_examples = take(b)
        now = time.monotonic()
        if t0 is None:
            if now - start >= WARMUP_S:
                t0 = now
            continue
        real += r_real
        slots += r_slots
        examples += r_examples
        n += 1
        if now - t0 >= seconds:
            dt = now - t0
            return {"tokens_per_second": real / dt, "examples_per_second": examples / dt,
                    "padding_fraction": 1.0 - real / slots if slots else 0.0, "batches": n,
                    "mean_length": real / examples if examples else 0.0}
    raise RuntimeError("the supply ended before the measurement did")


def run_stoker(url, seconds, mode):
    import stoker
    entry = [m for m in MODES if m[0] == mode]
    if not entry:
        sys.exit("ragged_loop: unknown mode %r (choose from %s)"
                 % (mode, ", ".join(m[0] for m in MODES)))
    _, kwargs, how = entry[0]
    params = inspect.signature(stoker.Client).parameters
    missing = [k for k in kwargs if k not in params]
    if missing:
        print(json.dumps({"skipped": "this stoker has no %s yet"
                          % ", ".join(k + "=" for k in missing)}))
        return

    def take(b):
        r = b["tokens"]
        label = np.asarray(b["label"])
        if how == "pack":
            _, _, real, slots = packed_slots(r)
        else:
            _, _, real, slots = padded_batch(r)
        label.sum()
        return real, slots, len(r)

    with stoker.Client(url, batch_size=BATCH, stall_timeout=10, **kwargs) as client:
        res = measure(client.batches(), seconds, take)
        res["delivery"] = client.delivery
    print(json.dumps(res))


def token_sequences():
    """An IterableDataset of the producers' sequences drawn with numpy (see the module's
    docstring), each worker with its own seed. (Made here so that MODES is read without torch.)
    """
    import torch.utils.data

    class TokenSequences(torch.utils.data.IterableDataset):
        def __iter__(self):
            info = torch.utils.data.get_worker_info()
            rng = np.random.default_rng(1 + (info.id if info else 0))
            mu = lognormal_mu()
            while True:
                n = min(CAP, max(1, int(round(rng.lognormal(mu, SIGMA)))))
                tokens = rng.integers(0, VOCAB, n, dtype=np.int32)
                label = int(2 * int(np.count_nonzero((tokens & 1) == 0)) > n)
                yield tokens, label

    return TokenSequences()


def pad_collate(examples):
    """(batch, longest) int32 padded with 0, int64 lengths, int64 labels."""
    import torch
    lengths = np.fromiter((len(t) for t, _ in examples), dtype=np.int64, count=len(examples))
    out = np.zeros((len(examples), int(lengths.max())), dtype=np.int32)
    for i, (t, _) in enumerate(examples):
        out[i, :len(t)] = t
    labels = torch.tensor([lab for _, lab in examples], dtype=torch.int64)
    return torch.from_numpy(out), torch.from_numpy(lengths), labels


def run_dataloader(workers, seconds):
    import torch.utils.data
    loader = torch.utils.data.DataLoader(token_sequences(), batch_size=BATCH, num_workers=workers,
                                         collate_fn=pad_collate)

    def take(b):
        x, lengths, labels = b
        labels.sum()
        return int(lengths.sum()), x.numel(), x.shape[0]

    print(json.dumps(measure(iter(loader), seconds, take)))
    sys.stdout.flush()
    os._exit(0)  # the workers' infinite iterators: do not wait for them


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "stoker":
        run_stoker(sys.argv[2], float(sys.argv[3]), sys.argv[4])
    elif len(sys.argv) == 4 and sys.argv[1] == "dataloader":
        run_dataloader(int(sys.argv[2]), float(sys.argv[3]))
    else:
        sys.exit(__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main()
