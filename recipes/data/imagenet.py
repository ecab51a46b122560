"""ImageNet-1k from the ILSVRC folder layout: <root>/<wnid>/<image>.JPEG, classes sorted by wnid.

Decoding with Pillow (torchvision is not available): random resized crop and
horizontal flip for training, ImageNet mean/std normalisation. Each worker reads
its own slice of a seeded shuffle of the file list; the position is (epoch, index).
Held-out images: `data.eval_path`, else the `val/` folder beside `train/` (same class
folders), centre-cropped; a fixed seeded sample of them, the same on every rank.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy
import torch

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
EXTENSIONS = {".jpeg", ".jpg", ".png"}


def list_images(root: Path) -> tuple[list[tuple[Path, int]], list[str]]:
    if not root.is_dir():
        raise FileNotFoundError(f"ImageNet folder not found: {root} — set data.path to the train/ folder "
                                "holding one sub-folder per class (n01440764/ ...)")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir())
    items = [(f, label) for label, c in enumerate(classes) for f in sorted((root / c).iterdir())
             if f.suffix.lower() in EXTENSIONS]
    return items, classes


def load_image(path: Path, size: int, rng: random.Random, train: bool = True) -> torch.Tensor:
    from PIL import Image

    with Image.open(path) as img:
        img = img.convert("RGB")
        w, h = img.size
        if train:  # random resized crop: 35-100% of the area, aspect 3/4..4/3
            area = w * h * rng.uniform(0.35, 1.0)
            aspect = rng.uniform(3 / 4, 4 / 3)
            cw = min(w, max(1, int(round((area * aspect) ** 0.5))))
            ch = min(h, max(1, int(round((area / aspect) ** 0.5))))
            left, top = rng.randint(0, w - cw), rng.randint(0, h - ch)
        else:
            cw = ch = min(w, h)
            left, top = (w - cw) // 2, (h - ch) // 2
        img = img.resize((size, size), Image.BILINEAR, box=(left, top, left + cw, top + ch))
        if train and rng.random() < 0.5:
            img = img.transpose(Image.FLIP_LEFT_RIGHT)
        array = numpy.asarray(img, dtype=numpy.float32) / 255.0
    return (torch.from_numpy(array).permute(2, 0, 1) - MEAN) / STD


class ImageFolderData:
    """Batches of (pixel_values, labels) from this rank's shard of the image folder."""

    def __init__(self, root: str | None, *, image_size: int, batch_size: int, seed: int, rank: int,
                 world_size: int, eval_root: str | None = None) -> None:
        train_root = Path(root or "data/imagenet/train")
        self.items, self.classes = list_images(train_root)
        self.eval_root = Path(eval_root) if eval_root else train_root.with_name("val")
        if not self.eval_root.is_dir() or self.eval_root.resolve() == train_root.resolve():
            self.eval_batches = None  # no held-out images: no eval_loss
        if not self.items:
            raise FileNotFoundError(f"no images under {root}")
        self.image_size, self.batch_size = image_size, batch_size
        self.seed, self.rank, self.world_size = seed, rank, world_size
        self.epoch, self.index = 0, 0
        self._shard = self._shuffle(0)

    def _shuffle(self, epoch: int) -> list[tuple[Path, int]]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return [self.items[i] for i in order[self.rank::self.world_size]] or [self.items[0]]

    def next_batch(self) -> dict:
        images, labels = [], []
        for _ in range(self.batch_size):
            if self.index >= len(self._shard):
                self.epoch, self.index = self.epoch + 1, 0
                self._shard = self._shuffle(self.epoch)
            path, label = self._shard[self.index]
            rng = random.Random(hash((self.seed, self.rank, self.epoch, self.index)))
            images.append(load_image(path, self.image_size, rng))
            labels.append(label)
            self.index += 1
        return {"pixel_values": torch.stack(images), "labels": torch.tensor(labels)}

    def eval_batches(self, count: int) -> list[dict]:
        """`count` batches of held-out images (labels by the training folders' class order)."""
        items, classes = list_images(self.eval_root)
        label = {c: i for i, c in enumerate(self.classes)}
        items = [(path, label[classes[y]]) for path, y in items if classes[y] in label]
        if not items:
            raise FileNotFoundError(f"no held-out images of the training classes under {self.eval_root}")
        picked = random.Random(self.seed).sample(items, min(len(items), count * self.batch_size))
        batches = []
        for b in range(0, len(picked), self.batch_size):
            chunk = picked[b:b + self.batch_size]
            batches.append({"pixel_values": torch.stack([load_image(p, self.image_size, random.Random(0), train=False)
                                                         for p, _ in chunk]),
                            "labels": torch.tensor([y for _, y in chunk])})
        return batches

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
        self._shard = self._shuffle(self.epoch)
