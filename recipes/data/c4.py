"""C4 (or any text corpus): streamed with HF `datasets`, tokenized once into an on-disk cache.

Each rank streams its own shard (`split_dataset_by_node`) and writes its tokens to
`<out_dir>/<cache_dir>/c4-<key>-rank<r>of<w>.bin` (uint16/uint32) plus a `.json`
marker written last; a restart finds the marker and starts at once. Batches are
consecutive windows of `seq_len` tokens; the position is the window index.
Local files (`data.path`: .json/.jsonl(.gz) or .parquet, a `text` column) read
offline; otherwise `data.hub_name` (e.g. allenai/c4, config en) streams from the hub.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy
import torch

from recipes.schema import TrainConfig

BYTES_EOS = 255  # never a byte of UTF-8 text, so a clean document separator


class Tokenizer:
    """`bytes` (UTF-8 bytes, no download) or an HF tokenizer name/path."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "bytes":
            self.eos, self.vocab_size, self._hf = BYTES_EOS, 256, None
        else:
            from transformers import AutoTokenizer

            self._hf = AutoTokenizer.from_pretrained(name)
            self.eos = self._hf.eos_token_id if self._hf.eos_token_id is not None else 0
            self.vocab_size = len(self._hf)

    def encode(self, text: str) -> list[int]:
        if self._hf is None:
            return list(text.encode("utf-8"))
        return self._hf(text, add_special_tokens=False)["input_ids"]


def _stream(cfg: TrainConfig, rank: int, world_size: int):
    from datasets import load_dataset
    from datasets.distributed import split_dataset_by_node

    d = cfg.data
    if d.path:
        files = sorted(str(p) for p in Path(d.path).glob("*") if p.is_file()) if Path(d.path).is_dir() else [d.path]
        builder = "parquet" if files[0].endswith(".parquet") else "json"
        ds = load_dataset(builder, data_files=files, split="train", streaming=True)
    else:
        ds = load_dataset(d.hub_name or "allenai/c4", d.hub_config or "en", split="train", streaming=True,
                          token=os.environ.get("HF_TOKEN"))
    return split_dataset_by_node(ds, rank=rank, world_size=world_size)


def build_cache(cfg: TrainConfig, rank: int, world_size: int, out_dir: Path, report=None) -> Path:
    """Tokenize this rank's shard up to the token budget once; later calls return the cached file.
    `report` (recipes.telemetry.ProgressEvents) hears the tokens written so far."""
    d = cfg.data
    budget = d.max_tokens or (cfg.steps * d.batch_size * d.seq_len + d.seq_len)
    key = hashlib.sha1(json.dumps([d.path, d.hub_name, d.hub_config, d.tokenizer, budget]).encode()).hexdigest()[:12]
    cache = (out_dir / d.cache_dir).resolve()
    cache.mkdir(parents=True, exist_ok=True)
    stem = cache / f"c4-{key}-rank{rank}of{world_size}"
    marker, data_file = stem.with_suffix(".json"), stem.with_suffix(".bin")
    if marker.exists():
        return data_file
    if report is not None:
        report.total = budget
    tok = Tokenizer(d.tokenizer)
    dtype = numpy.uint16 if tok.vocab_size <= 65536 else numpy.uint32
    written = 0
    tmp = stem.with_suffix(f".bin.tmp{os.getpid()}")  # the cache is shared per node: no two writers share a file
    with tmp.open("wb") as fh:
        for row in _stream(cfg, rank, world_size):
            ids = tok.encode(row["text"]) + [tok.eos]
            numpy.asarray(ids, dtype=dtype).tofile(fh)
            written += len(ids)
            if report is not None:
                report.progress(written)
            if written >= budget:
                break
    if written < d.seq_len + 1:
        raise ValueError(f"rank {rank} got only {written} tokens from its shard; need at least {d.seq_len + 1}")
    os.replace(tmp, data_file)
    marker.write_text(json.dumps({"tokens": written, "dtype": numpy.dtype(dtype).name, "tokenizer": d.tokenizer}))
    return data_file


class C4Data:
    """Windows of the cached token stream of this rank."""

    def __init__(self, cfg: TrainConfig, rank: int, world_size: int, out_dir: Path, report=None) -> None:
        data_file = build_cache(cfg, rank, world_size, out_dir, report)
        meta = json.loads(data_file.with_suffix(".json").read_text())
        self.cached = report is not None and report.total is None  # the marker was there already
        self.prepared = meta["tokens"]
        self.tokens = numpy.memmap(data_file, dtype=meta["dtype"], mode="r")
        self.batch_size, self.seq_len = cfg.data.batch_size, cfg.data.seq_len
        self.windows = (len(self.tokens) - 1) // self.seq_len
        self.position = 0

    def next_batch(self) -> dict:
        rows = []
        for _ in range(self.batch_size):
            start = (self.position % self.windows) * self.seq_len
            rows.append(torch.from_numpy(self.tokens[start:start + self.seq_len].astype(numpy.int64)))
            self.position += 1
        return {"input_ids": torch.stack(rows)}

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]
