"""C4 (or any text corpus): streamed with HF `datasets`, tokenized once into an on-disk cache.

Each rank streams its own shard (`split_dataset_by_node`) and writes its tokens to
`<out_dir>/<cache_dir>/c4-<key>-rank<r>of<w>.bin` (uint16/uint32) plus a `.json`
marker written last; a restart finds the marker and starts at once. The cache is shared per
node, so no link in it is followed (recipes.data.shared_cache). Batches are
consecutive windows of `seq_len` tokens; the position is the window index.
Local files (`data.path`: .json/.jsonl(.gz) or .parquet, a `text` column) read
offline; otherwise `data.hub_name` (e.g. allenai/c4, config en) streams from the hub.
Held-out text (`eval_batches`) comes from `data.eval_path`, else from the files named
`*validation*` in the `data.path` folder (C4's own naming; they are never trained on),
else from the hub's `validation` split; a single local file has none unless `eval_path` is set.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy
import torch

from recipes.data import shared_cache
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


def _files(path: str) -> list[str]:
    p = Path(path)
    return sorted(str(f) for f in p.glob("*") if f.is_file()) if p.is_dir() else [str(p)]


def heldout_files(cfg: TrainConfig) -> list[str] | None:
    """Local held-out files, [] for the hub's validation split, None when there is no held-out text."""
    d = cfg.data
    if d.eval_path:
        return _files(d.eval_path)
    if d.path:
        found = [f for f in _files(d.path) if "validation" in Path(f).name] if Path(d.path).is_dir() else []
        return found or None
    return []


def _local(files: list[str]):
    from datasets import load_dataset

    builder = "parquet" if files[0].endswith(".parquet") else "json"
    return load_dataset(builder, data_files=files, split="train", streaming=True)


def _stream(cfg: TrainConfig, rank: int, world_size: int, split: str = "train"):
    from datasets import load_dataset
    from datasets.distributed import split_dataset_by_node

    d = cfg.data
    if split != "train":  # the same held-out rows on every rank
        files = heldout_files(cfg)
        if files:
            return _local(files)
        return load_dataset(d.hub_name or "allenai/c4", d.hub_config or "en", split="validation", streaming=True,
                            token=os.environ.get("HF_TOKEN"))
    if d.path:
        files = _files(d.path)
        if Path(d.path).is_dir():
            files = [f for f in files if "validation" not in Path(f).name] or files
        ds = _local(files)
    else:
        ds = load_dataset(d.hub_name or "allenai/c4", d.hub_config or "en", split="train", streaming=True,
                          token=os.environ.get("HF_TOKEN"))
    return split_dataset_by_node(ds, rank=rank, world_size=world_size)


def build_cache(cfg: TrainConfig, rank: int, world_size: int, out_dir: Path, report=None, split: str = "train",
                budget: int = 0) -> Path:
    """Tokenize this rank's shard (or the held-out rows) up to the token budget once; later calls
    return the cached file. `report` (recipes.telemetry.ProgressEvents) hears the tokens written so far."""
    d = cfg.data
    budget = budget or d.max_tokens or (cfg.steps * d.batch_size * d.seq_len + d.seq_len)
    key = hashlib.sha1(json.dumps([d.path, d.hub_name, d.hub_config, d.tokenizer, budget, split,
                                   d.eval_path]).encode()).hexdigest()[:12]
    part = f"rank{rank}of{world_size}" if split == "train" else split
    stem = f"c4-{key}-{part}"
    cache = shared_cache.open_dir(out_dir, d.cache_dir)  # shared per node: no link in it is followed
    try:
        if not (shared_cache.is_plain_file(cache, f"{stem}.json") and shared_cache.is_plain_file(cache, f"{stem}.bin")):
            _tokenize(cfg, rank, world_size, split, budget, report, cache, stem)
    finally:
        os.close(cache)
    return out_dir / d.cache_dir / f"{stem}.bin"


def _tokenize(cfg: TrainConfig, rank: int, world_size: int, split: str, budget: int, report, cache: int,
              stem: str) -> None:
    """Write `stem`.bin, then its `stem`.json marker, into the cache directory held open."""
    d = cfg.data
    if report is not None:
        report.total = budget
    tok = Tokenizer(d.tokenizer)
    dtype = numpy.uint16 if tok.vocab_size <= 65536 else numpy.uint32
    written = 0
    fd, tmp = shared_cache.new_temp(cache, f"{stem}.bin")
    try:
        with os.fdopen(fd, "wb") as fh:
            for row in _stream(cfg, rank, world_size, split):
                ids = tok.encode(row["text"]) + [tok.eos]
                numpy.asarray(ids, dtype=dtype).tofile(fh)
                written += len(ids)
                if report is not None:
                    report.progress(written)
                if written >= budget:
                    break
        if written < d.seq_len + 1:
            raise ValueError(f"rank {rank} got only {written} {split} tokens; need at least {d.seq_len + 1}")
        shared_cache.commit(cache, tmp, f"{stem}.bin")
    except BaseException:
        shared_cache.discard(cache, tmp)
        raise
    marker = {"tokens": written, "dtype": numpy.dtype(dtype).name, "tokenizer": d.tokenizer}
    shared_cache.write_file(cache, f"{stem}.json", json.dumps(marker).encode())


def _read_cache(data_file: Path) -> tuple[dict, numpy.memmap]:
    """The marker and the tokens of a cached file, neither opened through a link."""
    with shared_cache.open_file(data_file.with_suffix(".json")) as fh:
        meta = json.loads(fh.read())
    with shared_cache.open_file(data_file) as fh:
        return meta, numpy.memmap(fh, dtype=meta["dtype"], mode="r")


class C4Data:
    """Windows of the cached token stream of this rank; held-out windows from the validation text."""

    def __init__(self, cfg: TrainConfig, rank: int, world_size: int, out_dir: Path, report=None) -> None:
        self.cfg, self.rank, self.world_size, self.out_dir = cfg, rank, world_size, out_dir
        meta, self.tokens = _read_cache(build_cache(cfg, rank, world_size, out_dir, report))
        self.cached = report is not None and report.total is None  # the marker was there already
        self.prepared = meta["tokens"]
        self.batch_size, self.seq_len = cfg.data.batch_size, cfg.data.seq_len
        self.windows = (len(self.tokens) - 1) // self.seq_len
        self.position = 0
        self._heldout: list[dict] | None = None
        if heldout_files(cfg) is None:  # no held-out text: the end of training reports no eval_loss
            self.eval_batches = None

    def next_batch(self) -> dict:
        rows = []
        for _ in range(self.batch_size):
            start = (self.position % self.windows) * self.seq_len
            rows.append(torch.from_numpy(self.tokens[start:start + self.seq_len].astype(numpy.int64)))
            self.position += 1
        return {"input_ids": torch.stack(rows)}

    def eval_batches(self, count: int) -> list[dict]:
        """The first `count` batches of consecutive held-out windows (the same on every rank and call)."""
        if self._heldout is None or len(self._heldout) < count:
            budget = count * self.batch_size * self.seq_len + self.seq_len
            _, tokens = _read_cache(build_cache(self.cfg, self.rank, self.world_size, self.out_dir,
                                                split="validation", budget=budget))
            windows = (len(tokens) - 1) // self.seq_len
            rows = [torch.from_numpy(tokens[(i % windows) * self.seq_len:(i % windows + 1) * self.seq_len]
                                     .astype(numpy.int64)) for i in range(count * self.batch_size)]
            self._heldout = [{"input_ids": torch.stack(rows[b * self.batch_size:(b + 1) * self.batch_size])}
                             for b in range(count)]
        return self._heldout[:count]

    def state_dict(self) -> dict:
        return {"position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = state["position"]
