"""Every model's tiny size trains a step on synthetic data; every real loader reads its real format."""

from __future__ import annotations

import gzip
import json
import math
from pathlib import Path

import numpy
import pytest
import torch

from recipes.catalog import MODEL_SIZES
from recipes.config import parse_config
from recipes.data import build_data
from recipes.models import build_model

SYNTHETIC = {"gpt-neo": "markov", "gpt-neo-x": "markov", "gcn": "synthetic-graph",
             "resnet50": "synthetic-images", "resnet101": "synthetic-images", "wav2vec2": "synthetic-audio"}


def _cfg(model: str, source: str, tmp_path: Path, **data) -> object:
    return parse_config({"model": model, "size": "tiny", "steps": 4, "out_dir": str(tmp_path),
                         "data": {"source": source, "batch_size": 2, **data}})


@pytest.mark.parametrize("model", list(MODEL_SIZES))
def test_tiny_model_forward_backward_on_synthetic_data(model, tmp_path):
    torch.manual_seed(0)
    cfg = _cfg(model, SYNTHETIC[model], tmp_path)
    net, loss_fn = build_model(model, "tiny")
    data = build_data(cfg, rank=0, world_size=1, out_dir=tmp_path)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    loss, items = loss_fn(net, data.next_batch())
    assert math.isfinite(float(loss.detach())) and items > 0
    loss.backward()
    grads = [p.grad for p in net.parameters() if p.requires_grad]
    assert sum(g is not None and g.abs().sum() > 0 for g in grads) > len(grads) // 2
    before = [p.detach().clone() for p in net.parameters()]
    opt.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, net.parameters()))
    assert data.state_dict()["position"] == 1


def test_real_size_builders_match_known_parameter_counts():
    from recipes.models import count_parameters

    net, _ = build_model("resnet50", "full")
    assert round(count_parameters(net) / 1e6, 2) == 25.56


def test_markov_floor_matches_empirical_loss_of_the_true_chain():
    from recipes.data.markov import MarkovChain

    chain = MarkovChain(vocab=16, order=2, alpha=0.3, seed=3)
    seqs = chain.sample(3000, 32, torch.Generator().manual_seed(0))
    ctx, nll = seqs[:, 0], []
    for t in range(1, 32):  # the ideal predictor knows only the tokens seen so far
        if t < chain.order:
            joint = chain.stationary.view(16, 16)
            cond = joint / joint.sum(dim=1, keepdim=True)
            nll.append(-torch.log(cond[seqs[:, 0], seqs[:, 1]]))
            ctx = seqs[:, 0] * 16 + seqs[:, 1]
            continue
        nll.append(-torch.log(chain.probs[ctx, seqs[:, t]]))
        ctx = chain.next_context(ctx, seqs[:, t])
    empirical = float(torch.stack(nll).mean())
    assert empirical == pytest.approx(chain.entropy_floor(32), rel=0.02)
    assert chain.ideal_loss(seqs) == pytest.approx(empirical, rel=1e-5)  # the paired floor the bench uses


def test_c4_loader_tokenizes_local_json_once_and_shards_by_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    src = tmp_path / "c4"
    src.mkdir()
    docs = [{"text": f"document {i} " + "lorem ipsum " * 20, "url": "u", "timestamp": "t"} for i in range(40)]
    with gzip.open(src / "c4-train.00000-of-01024.json.gz", "wt") as fh:
        fh.writelines(json.dumps(d) + "\n" for d in docs)
    cfg = _cfg("gpt-neo", "c4", tmp_path, path=str(src), seq_len=32, tokenizer="bytes")
    shards = [build_data(cfg, rank=r, world_size=2, out_dir=tmp_path) for r in (0, 1)]
    batches = [s.next_batch()["input_ids"] for s in shards]
    assert batches[0].shape == (2, 32) and not torch.equal(batches[0], batches[1])
    text = bytes(batches[0][0].tolist()).decode("utf-8", errors="replace")
    assert "lorem" in text or "document" in text
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert len([c for c in cached if c.endswith(".bin")]) == 2
    again = build_data(cfg, rank=0, world_size=2, out_dir=tmp_path)  # from the cache, same tokens
    assert torch.equal(again.next_batch()["input_ids"], batches[0])


def _write_csv_gz(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as fh:
        fh.writelines(",".join(str(v) for v in numpy.atleast_1d(r)) + "\n" for r in rows)


def test_ogbn_arxiv_reads_the_ogb_raw_layout(tmp_path):
    root = tmp_path / "ogbn_arxiv"
    n = 30
    _write_csv_gz(root / "raw" / "node-feat.csv.gz", numpy.random.rand(n, 128).round(4))
    _write_csv_gz(root / "raw" / "node-label.csv.gz", numpy.arange(n) % 40)
    _write_csv_gz(root / "raw" / "edge.csv.gz", [(i, (i + 1) % n) for i in range(n)])
    _write_csv_gz(root / "split" / "time" / "train.csv.gz", range(20))
    _write_csv_gz(root / "split" / "time" / "valid.csv.gz", range(20, 25))
    _write_csv_gz(root / "split" / "time" / "test.csv.gz", range(25, 30))
    cfg = parse_config({"model": "gcn", "size": "arxiv", "steps": 2, "out_dir": str(tmp_path),
                        "data": {"source": "ogbn-arxiv", "path": str(root)}})
    data = build_data(cfg, rank=1, world_size=2, out_dir=tmp_path)
    batch = data.next_batch()
    assert batch["x"].shape == (n, 128) and batch["edge_index"].shape == (2, 2 * n)
    assert batch["train_idx"].tolist() == list(range(1, 20, 2))
    net, loss_fn = build_model("gcn", "arxiv")
    loss, items = loss_fn(net, batch)
    assert items == 10 and math.isfinite(float(loss))


def test_imagenet_reads_an_image_folder_of_jpegs(tmp_path):
    from PIL import Image

    root = tmp_path / "train"
    for c, wnid in enumerate(["n01440764", "n01443537"]):
        (root / wnid).mkdir(parents=True)
        for i in range(3):
            color = (200 * c, 50 * i, 100)
            Image.new("RGB", (48 + 8 * i, 40), color).save(root / wnid / f"{wnid}_{i}.JPEG")
    cfg = parse_config({"model": "resnet50", "size": "tiny", "steps": 2, "out_dir": str(tmp_path),
                        "data": {"source": "imagenet", "path": str(root), "batch_size": 3}})
    data = build_data(cfg, rank=0, world_size=2, out_dir=tmp_path)
    batch = data.next_batch()
    assert batch["pixel_values"].shape == (3, 3, 32, 32)
    assert set(batch["labels"].tolist()) <= {0, 1}
    assert data.state_dict() == {"epoch": 0, "index": 3}  # 6 images / 2 ranks = 3 per epoch
    data.next_batch()
    assert data.state_dict() == {"epoch": 1, "index": 3}


def test_librispeech_reads_flac_in_the_openslr_layout(tmp_path):
    import soundfile

    chapter = tmp_path / "train-clean-100" / "19" / "198"
    chapter.mkdir(parents=True)
    for u in range(2):
        t = numpy.arange(16000 * (1 + u)) / 16000
        soundfile.write(chapter / f"19-198-000{u}.flac", numpy.sin(2 * numpy.pi * 220 * t).astype("float32"), 16000)
    (chapter / "19-198.trans.txt").write_text("19-198-0000 HELLO\n19-198-0001 WORLD\n")
    cfg = parse_config({"model": "wav2vec2", "size": "tiny", "steps": 2, "out_dir": str(tmp_path),
                        "data": {"source": "librispeech", "path": str(tmp_path / "train-clean-100"),
                                 "batch_size": 2, "audio_seconds": 0.5}})
    data = build_data(cfg, rank=0, world_size=1, out_dir=tmp_path)
    batch = data.next_batch()
    assert batch["input_values"].shape == (2, 8000)
    assert abs(float(batch["input_values"].std()) - 1.0) < 0.05
    net, loss_fn = build_model("wav2vec2", "tiny")
    loss, _ = loss_fn(net, batch)
    assert math.isfinite(float(loss))
