"""GPUs: NVIDIA through nvidia-smi's CSV query, AMD through rocm-smi's JSON.

rocm-smi's JSON keys change spelling across ROCm releases ("Card series" in 5.x,
"Card Series" in 6.x, "Device Name" on some 6.2+ parts), so keys are matched loosely.
"""

from __future__ import annotations

import json
import re

NVIDIA_COMMAND = ("command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi "
                  "--query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits 2>&1")
# /dev/kfd (the amdgpu compute driver) says "AMD GPUs" even where rocm-smi is not installed
ROCM_COMMAND = ("[ -e /dev/kfd ] && echo kfd; command -v rocm-smi >/dev/null 2>&1 && "
                "rocm-smi --showproductname --showmeminfo vram --json")
_NAME_KEYS = ("cardseries", "devicename", "cardmodel")
_VRAM_KEY = "vramtotalmemoryb"


def parse_nvidia(output: str) -> dict:
    """-> {"gpus": [...], "error": str|None}; nvidia-smi prints its failures on stdout."""
    gpus, problems = [], []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 4 and parts[0].isdigit():
            memory = parts[2]
            gpus.append({"vendor": "nvidia", "index": int(parts[0]), "name": parts[1],
                         "memory_mb": int(float(memory)) if _number(memory) else None,
                         "driver": parts[3]})
        elif line.strip():
            problems.append(line.strip())
    return {"gpus": gpus, "error": " ".join(problems) or None}


def _number(text: str) -> bool:
    return bool(re.fullmatch(r"\d+(\.\d+)?", text))


def _loose(key: str) -> str:
    return re.sub(r"[^a-z0-9]", "", key.lower())


def parse_rocm(output: str) -> dict:
    """-> {"gpus": [...], "error": str|None, "kfd": bool}."""
    kfd = "kfd" in output.split("{", 1)[0].split()
    text = output[output.find("{"):] if "{" in output else ""
    if not text.strip():
        return {"gpus": [], "error": None, "kfd": kfd}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return {"gpus": [], "error": f"rocm-smi printed no valid JSON: {exc}", "kfd": kfd}
    gpus = []
    cards = sorted((k for k in data if re.fullmatch(r"card\d+", k)), key=lambda k: int(k[4:]))
    for card in cards:
        fields = {_loose(k): str(v).strip() for k, v in data[card].items()}
        name = next((fields[k] for k in _NAME_KEYS if fields.get(k) not in (None, "", "N/A")), "AMD GPU")
        vram = fields.get(_VRAM_KEY, "")
        gpus.append({"vendor": "amd", "index": int(card[4:]), "name": name,
                     "memory_mb": int(vram) // 2**20 if vram.isdigit() else None,
                     "driver": fields.get("driverversion") or None,
                     "gfx": fields.get("gfxversion") or None})
    return {"gpus": gpus, "error": None, "kfd": kfd}


def vendors(facts: dict) -> set[str]:
    """"nvidia" and/or "amd": the GPUs the node's facts show (cards, or AMD's compute driver)."""
    found = {g.get("vendor") for g in facts.get("gpus", [])}
    return (found | ({"amd"} if facts.get("amd_kfd") else set())) & {"nvidia", "amd"}
