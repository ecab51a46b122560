"""LibriSpeech from the OpenSLR layout, for wav2vec 2.0 pre-training (audio only).

    <root>/<speaker>/<chapter>/<speaker>-<chapter>-<utt>.flac  (16 kHz mono)
    <root>/<speaker>/<chapter>/<speaker>-<chapter>.trans.txt   (transcripts; unused by pre-training)

Clips are cropped (at a seeded offset) or zero-padded to `seconds` and normalised.
Held-out clips: `data.eval_path`, else the `dev-clean/` split beside the training split;
a fixed seeded sample, cropped at fixed offsets, the same on every rank.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy
import torch

from recipes.data.synthetic import normalize_audio

SAMPLE_RATE = 16_000


class LibriSpeechData:
    """Batches of `input_values` from this rank's shard of the .flac files."""

    def __init__(self, root: str | None, *, seconds: float, batch_size: int, seed: int, rank: int,
                 world_size: int, eval_root: str | None = None) -> None:
        base = Path(root or "data/LibriSpeech/train-clean-100")
        self.eval_root = Path(eval_root) if eval_root else base.with_name("dev-clean")
        if not self.eval_root.is_dir() or self.eval_root.resolve() == base.resolve():
            self.eval_batches = None  # no held-out audio: no eval_loss
        if not base.is_dir():
            raise FileNotFoundError(f"LibriSpeech folder not found: {base} — set data.path to a split folder "
                                    "such as LibriSpeech/train-clean-100")
        files = sorted(base.rglob("*.flac"))
        if not files:
            raise FileNotFoundError(f"no .flac files under {base}")
        self.files = files[rank::world_size] or files[:1]
        self.samples, self.batch_size = int(seconds * SAMPLE_RATE), batch_size
        self.seed, self.rank = seed, rank
        self.epoch, self.index = 0, 0

    def _order(self) -> list[int]:
        order = list(range(len(self.files)))
        random.Random(self.seed * 7919 + self.epoch).shuffle(order)
        return order

    def _clip(self, path: Path, rng: random.Random) -> torch.Tensor:
        import soundfile

        audio, rate = soundfile.read(str(path), dtype="float32")
        if rate != SAMPLE_RATE:
            raise ValueError(f"{path}: expected {SAMPLE_RATE} Hz audio, found {rate} Hz")
        audio = audio if audio.ndim == 1 else audio.mean(axis=1)
        if len(audio) > self.samples:
            start = rng.randint(0, len(audio) - self.samples)
            audio = audio[start:start + self.samples]
        clip = numpy.zeros(self.samples, dtype=numpy.float32)
        clip[:len(audio)] = audio
        return torch.from_numpy(clip)

    def next_batch(self) -> dict:
        clips, order = [], self._order()
        for _ in range(self.batch_size):
            if self.index >= len(order):
                self.epoch, self.index = self.epoch + 1, 0
                order = self._order()
            rng = random.Random(hash((self.seed, self.rank, self.epoch, self.index)))
            clips.append(self._clip(self.files[order[self.index]], rng))
            self.index += 1
        return {"input_values": normalize_audio(torch.stack(clips))}

    def eval_batches(self, count: int) -> list[dict]:
        files = sorted(self.eval_root.rglob("*.flac"))
        if not files:
            raise FileNotFoundError(f"no held-out .flac files under {self.eval_root}")
        picked = random.Random(self.seed).sample(files, min(len(files), count * self.batch_size))
        return [{"input_values": normalize_audio(torch.stack([self._clip(f, random.Random(i)) for i, f in
                                                              enumerate(picked[b:b + self.batch_size])]))}
                for b in range(0, len(picked), self.batch_size)]

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.index = state["epoch"], state["index"]
