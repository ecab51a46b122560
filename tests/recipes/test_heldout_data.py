"""Held-out data for the real image and audio loaders: the split beside the training one, or data.eval_path."""

from __future__ import annotations

import numpy

from recipes.config import parse_config
from recipes.data import build_data


def _images(root, colors):
    from PIL import Image

    for c, wnid in enumerate(["n01440764", "n01443537"]):
        (root / wnid).mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (40, 40), colors(c, i)).save(root / wnid / f"{wnid}_{i}.JPEG")


def test_imagenet_evaluates_on_val_beside_train_never_on_train(tmp_path):
    _images(tmp_path / "train", lambda c, i: (200 * c, 0, 0))
    cfg = parse_config({"model": "resnet50", "size": "tiny", "out_dir": str(tmp_path),
                        "data": {"source": "imagenet", "path": str(tmp_path / "train"), "batch_size": 3}})
    assert build_data(cfg, rank=0, world_size=1, out_dir=tmp_path).eval_batches is None  # no val/: no eval
    _images(tmp_path / "val", lambda c, i: (0, 200, 0))  # green: only held-out images are green
    data = build_data(cfg, rank=0, world_size=1, out_dir=tmp_path)
    batches = data.eval_batches(2)
    assert [len(b["labels"]) for b in batches] == [3, 1]  # 4 held-out images in batches of 3
    assert all(float(b["pixel_values"][:, 1].mean()) > float(b["pixel_values"][:, 0].mean()) for b in batches)
    assert [b["labels"].tolist() for b in batches] == [b["labels"].tolist() for b in data.eval_batches(2)]


def test_librispeech_evaluates_on_dev_clean_or_eval_path(tmp_path):
    import soundfile

    for split in ("train-clean-100", "dev-clean"):
        chapter = tmp_path / split / "19" / "198"
        chapter.mkdir(parents=True)
        t = numpy.arange(16000) / 16000
        soundfile.write(chapter / "19-198-0000.flac", numpy.sin(2 * numpy.pi * 220 * t).astype("float32"), 16000)
    cfg = parse_config({"model": "wav2vec2", "size": "tiny", "out_dir": str(tmp_path),
                        "data": {"source": "librispeech", "path": str(tmp_path / "train-clean-100"),
                                 "batch_size": 2, "audio_seconds": 0.5}})
    data = build_data(cfg, rank=0, world_size=1, out_dir=tmp_path)
    assert data.eval_root == tmp_path / "dev-clean"
    assert data.eval_batches(1)[0]["input_values"].shape == (1, 8000)
    cfg = parse_config({**cfg.model_dump(), "data": {**cfg.data.model_dump(), "eval_path": str(tmp_path / "nope")}})
    assert build_data(cfg, rank=0, world_size=1, out_dir=tmp_path).eval_batches is None
