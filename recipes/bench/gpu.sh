#!/usr/bin/env bash
# The prepared GPU run (issues 39 and 43): the recipe protocol at 25.3M parameters (gpt-neo 25m) on
# CUDA, about ten minutes on one H100/H200. NCCL needs one GPU per rank: on fewer GPUs than workers
# the ranks share them and exchange through gloo (recipes/bench/protocol.py says which it used).
#   bash recipes/bench/gpu.sh [OUT_DIR]        then put what it printed in recipes/bench/RESULTS.md
set -euo pipefail
out=${1:-${OUT:-gpu-results}}
mkdir -p "$out"
cd "$(dirname "$0")/../.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv | tee "$out/gpu.txt" || true
python - <<'PY' | tee -a "$out/gpu.txt"
import torch, torch.distributed as dist
print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count(),
      "nccl", dist.is_nccl_available() and ".".join(map(str, torch.cuda.nccl.version())))
PY
bench() { timeout "$1" python -m recipes.bench.protocol "${@:2}" --device cuda --size 25m 2>&1 | tee -a "$out/protocol.log"; }
bench 240 tune --workers 4 --json "$out/tune-w4.json"
bench 420 score --workers 4 --seeds 100 --ddp-from "$out/tune-w4.json" --json "$out/score-w4.json"
bench 120 bytes --json "$out/bytes.json"
