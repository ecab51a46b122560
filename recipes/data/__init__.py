"""Data sources: each gives `next_batch()`, `state_dict()` (the data position) and held-out batches.

Every worker reads its own shard: synthetic streams are seeded by rank, real
loaders split their files or rows by rank.
"""

from __future__ import annotations

from pathlib import Path

from recipes.catalog import MODEL_SIZES
from recipes.schema import TrainConfig
from recipes.telemetry import ProgressEvents


def build_data(cfg: TrainConfig, rank: int, world_size: int, out_dir: Path):
    """The data source named by `cfg.data.source` for this rank, announced by `data` events
    (start, progress where the source reports it, done) so the workspace shows PREPARING_DATA."""
    report = ProgressEvents(cfg.data.source, "tokens" if cfg.data.source == "c4" else "items", rank=rank)
    data = _build(cfg, rank, world_size, out_dir, report)
    report.done(getattr(data, "prepared", None), cached=getattr(data, "cached", False))
    return data


def _build(cfg: TrainConfig, rank: int, world_size: int, out_dir: Path, report: ProgressEvents):
    d = cfg.data
    spec = MODEL_SIZES[cfg.model][cfg.size]
    if d.source == "markov":
        from recipes.data.markov import MarkovData

        if d.markov_vocab > spec["vocab_size"]:
            raise ValueError(f"data.markov_vocab {d.markov_vocab} exceeds the model vocabulary {spec['vocab_size']}")
        return MarkovData(vocab=d.markov_vocab, order=d.markov_order, alpha=d.markov_alpha, seed=cfg.seed,
                          rank=rank, batch_size=d.batch_size, seq_len=d.seq_len)
    if d.source == "c4":
        from recipes.data.c4 import C4Data

        return C4Data(cfg, rank, world_size, out_dir, report)
    if d.source == "synthetic-graph":
        from recipes.data.graphs import SyntheticGraph

        return SyntheticGraph(spec, seed=cfg.seed, rank=rank, world_size=world_size)
    if d.source == "ogbn-arxiv":
        from recipes.data.ogbn_arxiv import OgbnArxiv

        return OgbnArxiv(d.path, rank=rank, world_size=world_size)
    image_size = d.image_size or spec.get("image_size", 224)
    if d.source == "synthetic-images":
        from recipes.data.synthetic import SyntheticImages

        return SyntheticImages(num_classes=spec["num_labels"], image_size=image_size, batch_size=d.batch_size,
                               seed=cfg.seed, rank=rank)
    if d.source == "imagenet":
        from recipes.data.imagenet import ImageFolderData

        return ImageFolderData(d.path, image_size=image_size, batch_size=d.batch_size, seed=cfg.seed,
                               rank=rank, world_size=world_size)
    if d.source == "synthetic-audio":
        from recipes.data.synthetic import SyntheticAudio

        return SyntheticAudio(seconds=d.audio_seconds, batch_size=d.batch_size, seed=cfg.seed, rank=rank)
    if d.source == "librispeech":
        from recipes.data.librispeech import LibriSpeechData

        return LibriSpeechData(d.path, seconds=d.audio_seconds, batch_size=d.batch_size, seed=cfg.seed,
                               rank=rank, world_size=world_size)
    raise ValueError(f"unknown data source {d.source!r}")
