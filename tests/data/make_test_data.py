"""Writes the small real-format data files (and the TorchScript models that read them) that the
data tests and the example sessions use, as a user would make them with NumPy and PyTorch:

    PYTHONPATH=<numpy, pillow>:<the LibTorch wheel's site folder> python3 make_test_data.py [OUT]

The outputs are committed beside this script (about 250 KB); run it again only to change them.
Everything is drawn from fixed seeds (torch.jit.save's archives differ in their bytes from run to
run, not in what they hold). The example sessions in resources/sessions/ read copies of the
tagger's, the regression's and the image classifier's files from resources/sessions/data/.
"""
import csv
import gzip
import os
import struct
import sys
from typing import NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))


def path(name):
    return os.path.join(OUT, name)


# Blobs: three Gaussian clusters in four dimensions, 50 samples each, shuffled.
rng = np.random.default_rng(7)
centres = np.array([[2.0, 0.0, 0.0, 1.0], [-2.0, 1.0, 0.0, -1.0], [0.0, -2.0, 2.0, 0.0]])
labels = np.repeat(np.arange(3), 50)
points = centres[labels] + rng.normal(scale=0.6, size=(150, 4))
order = rng.permutation(150)
x, y = points[order], labels[order].astype(np.int32)

np.save(path("blobs_x.npy"), np.asfortranarray(x))  # float64, Fortran order
np.save(path("blobs_y.npy"), y)  # int32
np.savez(path("blobs.npz"), x=x.astype(np.float32), y=y)  # stored members
torch.save({"x": torch.from_numpy(x).float(), "y": torch.from_numpy(y).long()},
           path("blobs_dict.pt"))
torch.save((torch.from_numpy(x).float(), torch.from_numpy(y).long()), path("blobs_tuple.pt"))


class Holder(torch.nn.Module):
    """Tensors as a TorchScript module's attributes: the portable way to hand them to C++."""

    def __init__(self, x: Tensor, y: Tensor):
        super().__init__()
        self.register_buffer("x", x)
        self.register_buffer("y", y)

    def forward(self) -> Tensor:
        return self.x


torch.jit.save(torch.jit.script(Holder(torch.from_numpy(x).float(), torch.from_numpy(y).long())),
               path("blobs_module.pt"))


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 16)
        self.fc2 = torch.nn.Linear(16, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


torch.manual_seed(0)
torch.jit.save(torch.jit.script(Mlp()), path("mlp.pt"))

# A tagger's sentences of 3 to 10 tokens (1..15; 0 pads), each token's tag its value mod 3.
rng = np.random.default_rng(11)
lengths = rng.integers(3, 11, size=96)
tokens = np.zeros((96, 10), dtype=np.int64)
for i, n in enumerate(lengths):
    tokens[i, :n] = rng.integers(1, 16, size=n)
tags = np.where(tokens > 0, tokens % 3, 0)
np.savez_compressed(path("tagger.npz"), tokens=tokens, lengths=lengths.astype(np.int64), tags=tags)


class Tagger(torch.nn.Module):
    """Per-token logits [batch, time, 3] for padded tokens and their lengths."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(16, 16)
        self.out = torch.nn.Linear(16, 3)

    def forward(self, tokens: Tensor, lengths: Tensor) -> Tensor:
        positions = torch.arange(tokens.size(1)).unsqueeze(0)
        mask = (positions < lengths.unsqueeze(1)).unsqueeze(2).float()
        return self.out(torch.tanh(self.embed(tokens)) * mask)


torch.manual_seed(0)
torch.jit.save(torch.jit.script(Tagger()), path("tagger.pt"))

# Regression: y = 2 x1 - x2 + 0.5 x3 + 1 plus a little noise, as CSV with a header.
rng = np.random.default_rng(3)
features = rng.normal(size=(80, 3))
target = features @ np.array([2.0, -1.0, 0.5]) + 1.0 + rng.normal(scale=0.01, size=80)
with open(path("regression.csv"), "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(["x1", "x2", "x3", "y"])
    for row, value in zip(features, target):
        writer.writerow([f"{v:.6f}" for v in row] + [f"{value:.6f}"])


class Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(x)


torch.manual_seed(0)
torch.jit.save(torch.jit.script(Linear()), path("linear.pt"))

# Byte order: a big-endian float32 array holding 0..5 as [2, 3].
np.save(path("big_endian.npy"), np.arange(6, dtype=">f4").reshape(2, 3))

# MNIST's IDX format: 40 digits' worth of 28x28 images (a bright square whose place is the label)
# gzipped as distributed, and their labels plain.
rng = np.random.default_rng(5)
digits = rng.integers(0, 10, size=40).astype(np.uint8)
pictures = rng.integers(0, 40, size=(40, 28, 28)).astype(np.uint8)
for i, d in enumerate(digits):
    pictures[i, 2 + 2 * d:6 + 2 * d, 10:18] = 255
os.makedirs(path("mnist"), exist_ok=True)
with gzip.GzipFile(path("mnist/train-images-idx3-ubyte.gz"), "wb", mtime=0) as f:
    f.write(struct.pack(">IIII", 0x0803, 40, 28, 28) + pictures.tobytes())
with open(path("mnist/train-labels-idx1-ubyte"), "wb") as f:
    f.write(struct.pack(">II", 0x0801, 40) + digits.tobytes())

# CIFAR-10's binary batches: records of a label byte and a 32x32 image's three planes.
rng = np.random.default_rng(9)
os.makedirs(path("cifar10"), exist_ok=True)
for batch, count in ((1, 8), (2, 4)):
    labels = rng.integers(0, 10, size=count).astype(np.uint8)
    planes = rng.integers(0, 256, size=(count, 3 * 32 * 32)).astype(np.uint8)
    records = np.concatenate([labels[:, None], planes], axis=1)
    with open(path(f"cifar10/data_batch_{batch}.bin"), "wb") as f:
        f.write(records.tobytes())


# The blobs classifier as networks with auxiliary classifiers are written: forward returns a named
# tuple whose auxiliary output, from the hidden layer, is None in eval mode.
class Outputs(NamedTuple):
    logits: Tensor
    aux: Optional[Tensor]


class AuxMlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 16)
        self.fc2 = torch.nn.Linear(16, 3)
        self.aux = torch.nn.Linear(16, 3)

    def forward(self, x: Tensor) -> Outputs:
        hidden = torch.relu(self.fc1(x))
        aux = self.aux(hidden) if self.training else None
        return Outputs(self.fc2(hidden), aux)


torch.manual_seed(0)
torch.jit.save(torch.jit.script(AuxMlp()), path("aux_mlp.pt"))

# An image folder as torchvision's ImageFolder reads it: one sub-folder per class of stripes
# (horizontal, vertical) and checks, 24 images each, 20 to 28 pixels a side, random colours and
# noise; PNG (RGB, grey, with alpha) and JPEG. Pillow writes them (pip install pillow).
from PIL import Image  # noqa: E402

rng = np.random.default_rng(13)
for label, kind in enumerate(["checks", "columns", "rows"]):
    os.makedirs(path(f"images/{kind}"), exist_ok=True)
    for i in range(24):
        h, w = rng.integers(20, 29, size=2)
        period = int(rng.integers(3, 6))
        yy, xx = np.mgrid[0:h, 0:w]
        if kind == "rows":
            on = (yy // period) % 2 == 0
        elif kind == "columns":
            on = (xx // period) % 2 == 0
        else:
            on = ((yy // period) + (xx // period)) % 2 == 0
        fg, bg = rng.integers(0, 256, size=3), rng.integers(0, 256, size=3)
        luma = np.array([0.299, 0.587, 0.114])  # the stripes must show in grey too
        while abs(float((fg.astype(float) - bg.astype(float)) @ luma)) < 60:
            fg, bg = rng.integers(0, 256, size=3), rng.integers(0, 256, size=3)
        pixels = np.where(on[:, :, None], fg, bg) + rng.normal(scale=8, size=(h, w, 3))
        picture = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
        name = path(f"images/{kind}/{i:02d}")
        if i % 4 == 0:
            picture.save(name + ".jpg", quality=90)
        elif i % 4 == 1:
            picture.convert("L").save(name + ".png")
        elif i % 4 == 2:
            picture.convert("RGBA").save(name + ".PNG")
        else:
            picture.save(name + ".png")

# Red, green, blue and grey 128 in 2x2 pixels: a colour PNG read as grey must give PIL's
# convert("L"), 76, 150, 29, 128.
primaries = Image.new("RGB", (2, 2))
primaries.putdata([(255, 0, 0), (0, 255, 0), (0, 0, 255), (128, 128, 128)])
primaries.save(path("primaries.png"))


class SmallCnn(torch.nn.Module):
    """A classifier of 3x16x16 images into 3 classes (the image folder's stripes and checks)."""

    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, padding=1)
        self.fc = torch.nn.Linear(16, 3)

    def forward(self, images: Tensor) -> Tensor:
        h = torch.max_pool2d(torch.relu(self.conv1(images)), 2)
        h = torch.relu(self.conv2(h))
        return self.fc(h.mean(dim=(2, 3)))


torch.manual_seed(0)
torch.jit.save(torch.jit.script(SmallCnn()), path("cnn.pt"))


# The blobs as torch.save writes them from a GPU: each storage names cuda:0 as its device. Made
# here without one by a tagger that names that device for every storage (last: it is for good).
def on_gpu(storage) -> Optional[str]:
    return "cuda:0"


def never(obj, location):
    return None


torch.serialization.register_package(0, on_gpu, never)
torch.save({"x": torch.from_numpy(x).float(), "y": torch.from_numpy(y).long()},
           path("blobs_saved_on_gpu.pt"))
