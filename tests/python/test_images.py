"""The images generator feeds PyTorch the way its losses want: uint8 pixels and int64
scalar labels reach a training loop as torch.uint8 (B, 3, H, W) and torch.int64 (B,), the loop
normalizes on its side with the mean and std the label map declares, and cross_entropy takes
the labels as they come (no .view(-1).long())."""

import json
import os
import subprocess
import sys

from helpers import Cluster, require, run

torch = require("torch")
require("numpy")
import stoker  # noqa: E402
from stoker.torch import StokerIterableDataset  # noqa: E402

ROOT = os.environ.get("STOKER_SOURCE_ROOT", ".")


def test_uint8_images_and_int64_labels_train_a_torch_loop():
    torch.manual_seed(0)
    with Cluster() as c:
        images = os.path.join(c.dir, "images")
        subprocess.run([sys.executable, os.path.join(ROOT, "bench", "make_images.py"), images,
                        "3", "4", "40", "30"], check=True, capture_output=True)
        label_map = os.path.join(c.dir, "labels.json")
        c.producer("--generator", "images", "--images", images, "--size", "12x16", "--output",
                   "uint8", "--label-map", label_map, "--chunk", "16",
                   "--augment", "rrc(0.3,1;0.75,1.33),hflip,jitter(b=0.2,s=0.2),normalize")
        ds = StokerIterableDataset(c.url, batch_size=32, stall_timeout=10, max_batches=40)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 12 * 16, 3))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        seen = 0
        for batch in torch.utils.data.DataLoader(ds, batch_size=None):
            x, y = batch["image"], batch["label"]
            assert x.dtype == torch.uint8 and tuple(x.shape) == (32, 3, 12, 16), (x.dtype, x.shape)
            assert y.dtype == torch.int64 and tuple(y.shape) == (32,), (y.dtype, y.shape)
            assert int(y.min()) >= 0 and int(y.max()) <= 2
            if seen == 0:  # written before the first push
                with open(label_map) as f:
                    m = json.load(f)
                assert [k["name"] for k in m["classes"]] == ["class0", "class1", "class2"], m
                assert [k["files"] for k in m["classes"]] == [4, 4, 4], m
                mean = torch.tensor(m["normalize"]["mean"]).view(1, 3, 1, 1)
                std = torch.tensor(m["normalize"]["std"]).view(1, 3, 1, 1)
            xf = (x.float() / 255 - mean) / std
            loss = torch.nn.functional.cross_entropy(model(xf), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            seen += 1
        assert seen == 40
        assert stoker.status(c.url)["counters"]["discrepancy"] == 0


run(globals())
