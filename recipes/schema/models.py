"""The config sections: one pydantic model each, a docstring per field (shown by the
app's editor and exported as JSON Schema descriptions), choices as Literal, bounds
where a value outside them cannot run.

The docstrings become descriptions through recipes.schema.docs_cache (read from this file
once per change of it, not at every import), and each model is built on its first use
(defer_build): importing the schema costs a command or the app little (issue 45).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, Optional

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict

from recipes.catalog import MODEL_DATA, MODEL_SIZES
from recipes.schema import docs_cache, yaml_limits

PRESETS_PATH = Path(__file__).resolve().parents[1] / "presets.yaml"


def _read_preset_names() -> list[str]:
    data = yaml_limits.load(PRESETS_PATH.read_text()) or {}
    return list(data.get("presets", data))


def _preset_names() -> tuple[str, ...]:
    """The presets' names, read from presets.yaml once per change of it (parsing it took a
    third of this module's import)."""
    return tuple(docs_cache.cached("preset-names", [PRESETS_PATH], _read_preset_names))


def _not_bool(value: Any) -> Any:
    """YAML `true` is not a number; PyYAML reads `3e-4` (no dot) as a string, which pydantic parses."""
    if isinstance(value, bool):
        raise ValueError("a float, not true/false")
    return value


Int = Annotated[int, Strict()]
Bool = Annotated[bool, Strict()]
Str = Annotated[str, Strict()]
Float = Annotated[float, BeforeValidator(_not_bool)]

# An HF Hub repo id, matched in full: a name or namespace/name, each of letters, digits, '.', '_', '-' (the
# Hub's own rule; no '/' beyond the one, no whitespace or control characters to reach a log line)
HF_REPO_ID = r"^(?:[A-Za-z0-9][A-Za-z0-9._-]{0,95}/)?[A-Za-z0-9][A-Za-z0-9._-]{0,95}$"
HfRepo = Annotated[str, Strict(), Field(pattern=HF_REPO_ID)]

ModelName = Literal[tuple(MODEL_SIZES)]  # type: ignore[valid-type]
PresetName = Literal[_preset_names()]  # type: ignore[valid-type]
_SOURCES = tuple(dict.fromkeys(source for sources in MODEL_DATA.values() for source in sources))
DataSource = Literal[_SOURCES]  # type: ignore[valid-type]
WireBits = Literal[32, 16, 8, 4, 1]


class Section(BaseModel):
    """Unknown keys are errors (a typo must not silently fall back to a default)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class OptimConfig(Section):
    """The inner optimizer; for DDP it is the only optimizer."""

    name: Literal["adamw", "muon"] = "adamw"
    """adamw, or muon: Muon for hidden layers' weight matrices, AdamW for the rest; `lr` serves both."""
    lr: Float = Field(3e-3, gt=0)
    """Peak learning rate after warmup."""
    weight_decay: Float = 0.0
    """Decoupled weight decay (both optimizers)."""
    betas: list[Annotated[Float, Field(ge=0, lt=1)]] = Field(default_factory=lambda: [0.9, 0.95], min_length=2,
                                                            max_length=2)
    """AdamW (beta1, beta2), each in [0, 1); a preset's outer lr, and medium's H, follow beta1 (presets.yaml)."""
    muon_momentum: Float = Field(0.95, ge=0, lt=1)
    """Muon's Nesterov momentum (with name: muon)."""
    warmup_steps: Int = 20
    """Linear warmup from 0 to `lr` over this many steps."""
    schedule: Literal["cosine", "constant"] = "cosine"
    """Learning-rate shape after warmup."""
    min_lr_ratio: Float = 0.1
    """Cosine floor as a fraction of `lr`."""
    schedule_steps: Int = Field(0, ge=0)
    """Steps over which the cosine decays (0 = `steps`); later steps stay at the floor."""
    grad_clip: Float = 1.0
    """Clip the gradient norm to this value (0 disables)."""


class DilocoConfig(Section):
    """DiLoCo outer loop: what the preset does not fix."""

    inner_steps: Optional[Int] = Field(None, ge=1)
    """H, inner steps per outer step; null: the preset's for the run's Adam beta1 (medium: 12 at 0.9, 8 at 0.5)."""
    outer_lr: Optional[Float] = None
    """Outer Nesterov SGD learning rate on the averaged pseudo-gradient; null: the preset's for the run's Adam beta1
    (presets.yaml: 0.5 to 0.9 at beta1 0.9, 0.7 to 1.2 at 0.5; the nearest beta1 tuned wins)."""
    outer_momentum: Optional[Float] = None
    """Outer Nesterov momentum; null: the preset's (0.6; high 0.5)."""
    bits: Optional[WireBits] = None
    """Wire bits per value (32/16/8/4/1); null takes the preset's value."""
    block: Optional[Int] = None
    """Values per quantisation scale; null takes the preset's value."""
    error_feedback: Optional[Bool] = None
    """Add what quantisation dropped this outer step to the next one; null takes the preset's (on; off for ultra,
    whose long phases it hurt)."""
    flush_bits: Int = 0
    """At the end of training, send the error-feedback residual once at these bits (0 = drop it)."""
    overlap: Bool = False
    """Run the outer exchange during the next inner steps; each rank goes on from an eager outer step (its own
    fresh pseudo-gradient for its share of the average, the rest from the average that landed one step late)."""
    density: Optional[Float] = Field(None, gt=0, le=1)
    """Fraction of the values each quantised sync sends: the same random subset on every rank, the rest
    waits in error feedback (no index bits); null takes the preset's (1)."""
    rotate: Optional[Bool] = None
    """Rotate each block (random signs, then Walsh-Hadamard; the same on every rank) before an 8/4/1-bit
    codec quantises it, so outliers spread over the block; needs a power-of-two block; null takes the preset's."""
    fragments: Optional[Int] = Field(None, ge=1)
    """Streaming DiLoCo: sync the model in this many staggered fragments; null takes the preset's (1; ultra 2,
    which gives way to overlap and to more than one datacenter, where it syncs whole)."""


class DemoConfig(Section):
    """DeMo compression of the pseudo-gradient (used by the `demo` algorithm)."""

    chunk: Optional[Int] = None
    """DCT chunk width (values per chunk); null takes the preset's value."""
    topk: Optional[Int] = None
    """Coefficients kept per chunk; null takes the preset's value."""
    transform: Literal["dct", "none"] = "dct"
    """Where top-k picks: `dct` coefficients (DeMo) or `none`, the values themselves (SparseLoCo)."""
    decay: Float = 0.9
    """Decay of the decoupled momentum (error-feedback) buffer between outer steps."""
    sign_step: Bool = False
    """Step with sign(update) * sign_lr (DeMo paper) instead of outer Nesterov SGD."""
    sign_lr: Float = 1e-3
    """Step size of the sign step."""


class DataConfig(Section):
    """Where batches come from; `source` picks the loader."""

    source: DataSource = "markov"
    """The loader; each model trains on its own kinds (text, graph, images, audio)."""
    batch_size: Int = Field(16, ge=1)
    """Samples per worker per step."""
    seq_len: Int = Field(64, ge=1)
    """Tokens per sample (language models)."""
    path: Optional[Str] = None
    """Local files or a dataset root for real loaders; null uses the hub name."""
    hub_name: Optional[Str] = None
    """HF datasets name for streaming (e.g. allenai/c4) when `path` is null."""
    hub_config: Optional[Str] = None
    """HF datasets config name (e.g. en)."""
    eval_path: Optional[Str] = None
    """Held-out files; null: files named *validation* beside `path`, or the hub's validation split."""
    tokenizer: Str = "bytes"
    """`bytes` (UTF-8 bytes, no download) or an HF tokenizer name or local path."""
    cache_dir: Str = "cache"
    """Where tokenized data is cached; relative to out_dir."""
    max_tokens: Int = 0
    """Tokens to tokenize per worker into the cache (0 = enough for `steps`)."""
    markov_order: Int = 1
    """Markov chain order for synthetic text (context length of the chain)."""
    markov_alpha: Float = 0.1
    """Dirichlet concentration of each next-token distribution (smaller = lower entropy)."""
    markov_vocab: Int = 64
    """Tokens used by the Markov chain (must fit the model vocabulary)."""
    image_size: Optional[Int] = None
    """Image side in pixels; null takes the model size's value."""
    audio_seconds: Float = 1.0
    """Length of each audio crop in seconds."""
    num_workers: Int = 0
    """Background loader processes (0 loads in the training process)."""


class LoggingConfig(Section):
    """Progress lines, metrics JSONL and W&B."""

    log_every: Int = Field(10, ge=1)
    """Print and record metrics every this many steps."""
    wandb: Bool = True
    """Log to W&B on rank 0 (offline mode when WANDB_API_KEY is unset)."""
    wandb_project: Optional[Str] = None
    """W&B project; null gives each workspace its own (geotrain-<workspace id>); an existing one is fine."""
    wandb_entity: Optional[Str] = None
    """W&B entity (team); null uses the key's default."""
    wandb_init_timeout: Float = Field(30.0, ge=1, le=600)
    """Seconds W&B may take to start online; past them (or on any error) rank 0 logs offline for a later sync."""
    run_name: Optional[Str] = None
    """Run name shown in W&B; null derives one from model, size and preset."""
    eval_batches: Int = 4
    """Held-out batches evaluated at the end (rank 0)."""
    eval_every: Int = Field(0, ge=0)
    """Also evaluate the weights all ranks agree on every this many steps (0 = only at the end)."""


class CheckpointConfig(Section):
    """Checkpoints and their upload."""

    every: Int = 0
    """Save every this many steps (0 = only at the end)."""
    keep: Int = 2
    """Checkpoints kept on disk per rank (older ones are deleted)."""
    resume: Bool = True
    """Resume from the latest complete checkpoint in out_dir when one exists."""
    hf_repo: Optional[HfRepo] = None
    """HF Hub repo id (name or namespace/name) to upload checkpoints to (needs HF_TOKEN in the environment)."""
    hf_private: Bool = True
    """Create the HF repo as private."""


class DistConfig(Section):
    """Collective backend settings, tuned for WAN links."""

    backend: Literal["auto", "gloo", "nccl"] = "auto"
    """auto: nccl with CUDA, gloo otherwise."""
    timeout_s: Int = 1800
    """Collective timeout; long because a WAN outer step can take minutes."""
    socket_ifname: Optional[Str] = None
    """Network interface for gloo/NCCL sockets (e.g. wg0); null lets them pick."""


def _choices_per_model(schema: dict[str, Any]) -> None:
    """JSON Schema: once `model` is set, only its sizes and data sources are offered."""
    schema["allOf"] = [
        {"if": {"properties": {"model": {"const": model}}, "required": ["model"]},
         "then": {"properties": {"size": {"enum": list(sizes)},
                                 "data": {"properties": {"source": {"enum": list(MODEL_DATA[model])}}}}}}
        for model, sizes in MODEL_SIZES.items()
    ]


class TrainConfig(Section):
    """A complete training run; the top-level keys are what core reads and overrides."""

    model_config = ConfigDict(extra="forbid", defer_build=True, json_schema_extra=_choices_per_model,
                              title="geotrain training config")

    model: ModelName
    """Model name from the catalog."""
    size: Str
    """Size name of that model (tiny, 125m, ...)."""
    gradient_compression: PresetName = "medium"
    """Preset from recipes/presets.yaml: how often and how compactly workers synchronise."""
    algorithm: Optional[Literal["ddp", "diloco", "demo"]] = None
    """Override the preset's algorithm (e.g. demo with the ultra preset's H); null: the preset's."""
    steps: Int = Field(200, ge=1)
    """Inner (optimizer) steps per worker."""
    datacenters: Int = Field(1, ge=1, le=64)
    """Datacenters the workers form (ranks split evenly, in order) for hierarchical DiLoCo: gradients
    all-reduced inside a datacenter every step, the outer exchange between datacenters only; 1 = flat.
    Overridden by the GEOTRAIN_DC_* environment a launcher sets (recipes/topology.py)."""
    out_dir: Str = "runs/default"
    """Where metrics.jsonl, checkpoints/ and wandb/ go; relative to the cwd."""
    seed: Int = 0
    """Seeds model init (same on every rank) and data (offset per rank)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """auto: cuda:<local rank> when CUDA is available (shared round-robin with dist.backend gloo), else cpu."""
    precision: Literal["fp32", "bf16"] = "fp32"
    """Autocast dtype of the forward pass."""
    optim: OptimConfig = Field(default_factory=OptimConfig)
    """Inner optimizer."""
    diloco: DilocoConfig = Field(default_factory=DilocoConfig)
    """DiLoCo outer loop settings."""
    demo: DemoConfig = Field(default_factory=DemoConfig)
    """DeMo compression settings."""
    data: DataConfig = Field(default_factory=DataConfig)
    """Data source and batch shape."""
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    """Logging."""
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    """Checkpointing and upload."""
    dist: DistConfig = Field(default_factory=DistConfig)
    """torch.distributed settings."""


docs_cache.document([OptimConfig, DilocoConfig, DemoConfig, DataConfig, LoggingConfig, CheckpointConfig,
                     DistConfig, TrainConfig], Path(__file__).resolve())
