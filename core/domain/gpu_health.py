"""A node's GPU health for `clusters check`, pure: nvidia-smi's ECC counters and temperatures, the
kernel log's Xid lines, rocm-smi's temperatures, and each GPU's datasheet matmul figure.

- nvidia-smi --query-gpu fields (`nvidia-smi --help-query-gpu`, NVIDIA's nvidia-smi documentation):
  index, name, temperature.gpu, ecc.errors.corrected.volatile.total,
  ecc.errors.uncorrected.volatile.total; a GPU without ECC answers "[N/A]" (or "[Not Supported]").
- Xid messages, as the NVIDIA driver writes them to the kernel log (NVIDIA, "Xid Errors",
  https://docs.nvidia.com/deploy/xid-errors/): `NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has
  fallen off the bus.` The Xids judged as the node's (hardware, driver, ECC; not an application's
  own fault such as 13, 31 or 43) are HARDWARE_XIDS below.
- rocm-smi --showtemp --showuse --json: {"card0": {"Temperature (Sensor edge) (C)": "35.0",
  "GPU use (%)": "0", ...}} (ROCm's rocm_smi_lib, python_smi_tools/rocm_smi.py); rocm-smi's RAS
  (ECC) output differs between releases and is not read here.
"""

from __future__ import annotations

import json
import re

NVIDIA_HEALTH_COMMAND = ["nvidia-smi", "--query-gpu=index,name,temperature.gpu,ecc.errors.corrected.volatile.total,"
                         "ecc.errors.uncorrected.volatile.total", "--format=csv,noheader,nounits"]
ROCM_HEALTH_COMMAND = ["rocm-smi", "--showtemp", "--showuse", "--json"]
XID_LINE = re.compile(r"NVRM: Xid \((PCI:[0-9A-Fa-f:.]{4,32})\): ([0-9]{1,4}),? ?(.{0,200})")
# 48 double-bit ECC, 63/64 row remapping, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC
# rate, 94/95 contained/uncontained ECC, 119/120 GSP (the Xid catalog's hardware and driver causes).
HARDWARE_XIDS = frozenset({48, 63, 64, 74, 79, 92, 94, 95, 119, 120})
# Dense BF16 tensor throughput from the vendors' datasheets (TFLOP/s, without sparsity), most
# specific name first: NVIDIA H100 and H200 (989.4 SXM, 756 PCIe: half the "with sparsity" figures),
# A100 (312), L40S (362.05); AMD Instinct MI300X (1307.4), MI250X (383).
DATASHEET_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("A100", 312.0), ("L40S", 362.05),
                    ("MI300X", 1307.4), ("MI250X", 383.0))
SLOW_SHARE = 0.4  # a matmul below 40% of the datasheet figure is named as slow


def _count(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() and len(text) < 12 else None


def parse_nvidia_health(output: str) -> list[dict]:
    """One dict per GPU line; ECC counts are None where the GPU has no ECC ([N/A], [Not Supported])."""
    gpus = []
    for line in output.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        temperature = _count(parts[2])
        gpus.append({"index": int(parts[0]), "name": parts[1][:80], "temperature_c": temperature,
                     "ecc_corrected": _count(parts[3]), "ecc_uncorrected": _count(parts[4])})
    return gpus


def parse_xids(kernel_log: str) -> list[dict]:
    """The Xid lines of a kernel log, oldest first: PCI address, Xid number, its words, hardware or not."""
    found = []
    for match in XID_LINE.finditer(kernel_log):
        xid = int(match[2])
        found.append({"pci": match[1], "xid": xid, "text": match[3].strip(), "hardware": xid in HARDWARE_XIDS})
    return found


def parse_rocm_health(output: str) -> list[dict]:
    text = output[output.find("{"):] if "{" in output else ""
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return []
    gpus = []
    for card in sorted((k for k in data if re.fullmatch(r"card[0-9]{1,3}", k)), key=lambda k: int(k[4:])):
        fields = data[card] if isinstance(data[card], dict) else {}
        temp = next((v for k, v in fields.items() if k.startswith("Temperature") and "edge" in k.lower()), None)
        try:
            temperature = round(float(temp)) if temp is not None else None
        except (TypeError, ValueError):
            temperature = None
        gpus.append({"index": int(card[4:]), "name": "AMD GPU", "temperature_c": temperature,
                     "ecc_corrected": None, "ecc_uncorrected": None})
    return gpus


def datasheet_flops(device_name: str) -> float | None:
    """The device's dense BF16 figure in FLOP/s, or None for a CPU or a GPU not in the table."""
    return next((tflops * 1e12 for key, tflops in DATASHEET_TFLOPS if key.lower() in device_name.lower()), None)


def gpu_problems(gpus: list[dict], xids: list[dict]) -> list[str]:
    """Why the node's GPUs are not healthy, one phrase each (empty: nothing found)."""
    problems = [f"GPU {g['index']} has {g['ecc_uncorrected']} uncorrected ECC errors" for g in gpus
                if g.get("ecc_uncorrected")]
    problems += [f"Xid {x['xid']} on {x['pci']}: {x['text']}" for x in xids if x["hardware"]]
    return problems
