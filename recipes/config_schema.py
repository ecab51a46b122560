"""The recipe config: keyword-only dataclasses, one docstring per field.

Plain Python only (no torch) so that the app can validate a config it is editing
without paying for a torch import. `recipes.config` loads and checks YAML against
these classes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Optional


@dataclass(kw_only=True)
class OptimConfig:
    """The inner optimizer (AdamW); for DDP it is the only optimizer."""

    lr: float = 3e-3
    """Peak learning rate after warmup."""
    weight_decay: float = 0.0
    """Decoupled weight decay of AdamW."""
    betas: list[float] = field(default_factory=lambda: [0.9, 0.95])
    """AdamW (beta1, beta2)."""
    warmup_steps: int = 20
    """Linear warmup from 0 to `lr` over this many steps."""
    schedule: Literal["cosine", "constant"] = "cosine"
    """Learning-rate shape after warmup."""
    min_lr_ratio: float = 0.1
    """Cosine floor as a fraction of `lr`."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this value (0 disables)."""


@dataclass(kw_only=True)
class DilocoConfig:
    """DiLoCo outer loop: what the preset does not fix."""

    inner_steps: Optional[int] = None
    """H, inner steps per outer step; null takes the preset's value."""
    outer_lr: Optional[float] = None
    """Outer Nesterov SGD learning rate on the averaged pseudo-gradient; null: the preset's (0.7)."""
    outer_momentum: Optional[float] = None
    """Outer Nesterov momentum; null: the preset's (0.9)."""
    bits: Optional[int] = None
    """Wire bits per value (32/16/8/4); null takes the preset's value."""
    block: Optional[int] = None
    """Values per quantisation scale; null takes the preset's value."""
    error_feedback: bool = True
    """Add what quantisation dropped this outer step to the next one."""
    flush_bits: int = 0
    """At the end of training, send the error-feedback residual once at these bits (0 = drop it)."""
    overlap: bool = False
    """Run the outer all-reduce during the next inner steps (one-outer-step-delayed update)."""


@dataclass(kw_only=True)
class DemoConfig:
    """DeMo compression of the pseudo-gradient (used by the `demo` algorithm)."""

    chunk: Optional[int] = None
    """DCT chunk width (values per chunk); null takes the preset's value."""
    topk: Optional[int] = None
    """Coefficients kept per chunk; null takes the preset's value."""
    decay: float = 0.9
    """Decay of the decoupled momentum (error-feedback) buffer between outer steps."""
    sign_step: bool = False
    """Step with sign(update) * sign_lr (DeMo paper) instead of outer Nesterov SGD."""
    sign_lr: float = 1e-3
    """Step size of the sign step."""


@dataclass(kw_only=True)
class DataConfig:
    """Where batches come from; `source` picks the loader."""

    source: str = "markov"
    """markov | c4 | synthetic-graph | ogbn-arxiv | synthetic-images | imagenet | synthetic-audio | librispeech."""
    batch_size: int = 16
    """Samples per worker per step."""
    seq_len: int = 64
    """Tokens per sample (language models)."""
    path: Optional[str] = None
    """Local files or a dataset root for real loaders; null uses the hub name."""
    hub_name: Optional[str] = None
    """HF datasets name for streaming (e.g. allenai/c4) when `path` is null."""
    hub_config: Optional[str] = None
    """HF datasets config name (e.g. en)."""
    tokenizer: str = "bytes"
    """`bytes` (UTF-8 bytes, no download) or an HF tokenizer name or local path."""
    cache_dir: str = "cache"
    """Where tokenized data is cached; relative to out_dir."""
    max_tokens: int = 0
    """Tokens to tokenize per worker into the cache (0 = enough for `steps`)."""
    markov_order: int = 1
    """Markov chain order for synthetic text (context length of the chain)."""
    markov_alpha: float = 0.1
    """Dirichlet concentration of each next-token distribution (smaller = lower entropy)."""
    markov_vocab: int = 64
    """Tokens used by the Markov chain (must fit the model vocabulary)."""
    image_size: Optional[int] = None
    """Image side in pixels; null takes the model size's value."""
    audio_seconds: float = 1.0
    """Length of each audio crop in seconds."""
    num_workers: int = 0
    """Background loader processes (0 loads in the training process)."""


@dataclass(kw_only=True)
class LoggingConfig:
    """Progress lines, metrics JSONL and W&B."""

    log_every: int = 10
    """Print and record metrics every this many steps."""
    wandb: bool = True
    """Log to W&B on rank 0 (offline mode when WANDB_API_KEY is unset)."""
    wandb_project: str = "geotrain"
    """W&B project name."""
    wandb_entity: Optional[str] = None
    """W&B entity (team); null uses the key's default."""
    run_name: Optional[str] = None
    """Run name shown in W&B; null derives one from model, size and preset."""
    eval_batches: int = 4
    """Held-out batches evaluated at the end (rank 0)."""


@dataclass(kw_only=True)
class CheckpointConfig:
    """Checkpoints and their upload."""

    every: int = 0
    """Save every this many steps (0 = only at the end)."""
    keep: int = 2
    """Checkpoints kept on disk per rank (older ones are deleted)."""
    resume: bool = True
    """Resume from the latest complete checkpoint in out_dir when one exists."""
    hf_repo: Optional[str] = None
    """HF Hub repo to upload checkpoints to (needs HF_TOKEN in the environment)."""
    hf_private: bool = True
    """Create the HF repo as private."""


@dataclass(kw_only=True)
class DistConfig:
    """Collective backend settings, tuned for WAN links."""

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: nccl with CUDA, gloo otherwise."""
    timeout_s: int = 1800
    """Collective timeout; long because a WAN outer step can take minutes."""
    socket_ifname: Optional[str] = None
    """Network interface for gloo/NCCL sockets (e.g. wg0); null lets them pick."""


@dataclass(kw_only=True)
class TrainConfig:
    """A complete training run; the top-level keys are what core reads and overrides."""

    model: str
    """Model name from the catalog (gpt-neo, gpt-neo-x, gcn, resnet50, resnet101, wav2vec2)."""
    size: str
    """Size name of that model (tiny, 125m, ...)."""
    gradient_compression: str = "medium"
    """Preset name from recipes/presets.yaml: none, low, medium, high, ultra."""
    algorithm: Optional[Literal["ddp", "diloco", "demo"]] = None
    """Override the preset's algorithm (e.g. demo with the ultra preset's H); null: the preset's."""
    steps: int = 200
    """Inner (optimizer) steps per worker."""
    out_dir: str = "runs/default"
    """Where metrics.jsonl, checkpoints/ and wandb/ go; relative to the cwd."""
    seed: int = 0
    """Seeds model init (same on every rank) and data (offset per rank)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: cuda:<local rank> when CUDA is available, else cpu."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """Autocast dtype of the forward pass."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Inner optimizer."""
    diloco: DilocoConfig = field(default_factory=DilocoConfig)
    """DiLoCo outer loop settings."""
    demo: DemoConfig = field(default_factory=DemoConfig)
    """DeMo compression settings."""
    data: DataConfig = field(default_factory=DataConfig)
    """Data source and batch shape."""
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    """Logging."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Checkpointing and upload."""
    dist: DistConfig = field(default_factory=DistConfig)
    """torch.distributed settings."""
