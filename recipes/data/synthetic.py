"""Synthetic data for the non-text models, for offline runs and tests.

Like the Markov text, batch i of rank r is a pure function of (seed, r, i), so the
data position in a checkpoint is one integer and a resumed run sees the same data.
"""

from __future__ import annotations

import math

import torch

EVAL_STREAM = 1_000_003  # rank id of the held-out stream


class IndexedStream:
    """Shared bookkeeping of every generated dataset (Markov text too): a per-rank batch
    counter and a held-out stream; subclasses give `batch_at(index, stream)`."""

    def __init__(self, seed: int, rank: int) -> None:
        self.seed, self.rank, self.position = seed, rank, 0

    def generator(self, index: int, stream: int) -> torch.Generator:
        return torch.Generator().manual_seed(hash((self.seed, stream, index)) % (2 ** 62))

    def next_batch(self) -> dict:
        batch = self.batch_at(self.position, self.rank)
        self.position += 1
        return batch

    def eval_batches(self, count: int) -> list[dict]:
        return [self.batch_at(i, EVAL_STREAM) for i in range(count)]

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]


class SyntheticImages(IndexedStream):
    """Each class is a fixed smooth random pattern; samples are pattern + noise (learnable, not trivial)."""

    def __init__(self, *, num_classes: int, image_size: int, batch_size: int, seed: int, rank: int) -> None:
        super().__init__(seed, rank)
        self.num_classes, self.image_size, self.batch_size = num_classes, image_size, batch_size
        gen = torch.Generator().manual_seed(seed)
        coarse = torch.randn(num_classes, 3, 4, 4, generator=gen)
        self.templates = torch.nn.functional.interpolate(coarse, size=(image_size, image_size), mode="bilinear",
                                                         align_corners=False)

    def batch_at(self, index: int, stream: int) -> dict:
        gen = self.generator(index, stream)
        labels = torch.randint(0, self.num_classes, (self.batch_size,), generator=gen)
        noise = torch.randn(self.batch_size, 3, self.image_size, self.image_size, generator=gen)
        return {"pixel_values": self.templates[labels] + noise, "labels": labels}


class SyntheticAudio(IndexedStream):
    """16 kHz clips: a few harmonics of a random pitch plus noise, normalised like wav2vec2 inputs."""

    SAMPLE_RATE = 16_000

    def __init__(self, *, seconds: float, batch_size: int, seed: int, rank: int) -> None:
        super().__init__(seed, rank)
        self.samples, self.batch_size = int(seconds * self.SAMPLE_RATE), batch_size

    def batch_at(self, index: int, stream: int) -> dict:
        gen = self.generator(index, stream)
        t = torch.arange(self.samples) / self.SAMPLE_RATE
        pitch = 100 + 300 * torch.rand(self.batch_size, 1, generator=gen)
        wave = sum(torch.sin(2 * math.pi * k * pitch * t) / k for k in (1, 2, 3))
        wave = wave + 0.1 * torch.randn(self.batch_size, self.samples, generator=gen)
        wave = (wave - wave.mean(dim=1, keepdim=True)) / (wave.std(dim=1, keepdim=True) + 1e-7)
        return {"input_values": wave}


def normalize_audio(wave: torch.Tensor) -> torch.Tensor:
    """Zero mean, unit variance per clip (what Wav2Vec2FeatureExtractor does)."""
    return (wave - wave.mean(dim=-1, keepdim=True)) / (wave.std(dim=-1, keepdim=True) + 1e-7)
