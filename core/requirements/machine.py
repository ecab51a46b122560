"""One machine's facts judged against its share of a workspace: disk, memory, GPU memory.

Pure: facts in (the node pool's, or this machine's for `local`), findings out."""

from __future__ import annotations

from core.requirements.needs import Needs
from core.requirements.report import OK, UNKNOWN, Finding, gb


def judge(name: str, facts: dict, needs: Needs, local: bool) -> list[Finding]:
    return [_disk(name, facts, needs, local), _memory(name, facts, needs, local),
            *_gpu_memory(name, facts, needs)]


def _disk(name: str, facts: dict, needs: Needs, local: bool) -> Finding:
    disk = facts.get("disk") or {}
    if local:
        free, where = disk.get("free_gb"), f"free in {disk.get('path') or 'the data directory'}"
    else:
        free, where = disk.get("var_lib_free_gb"), "free under /var/lib"
    needed = f"{gb(needs.disk_gb)} ({needs.disk_parts()})"
    if not isinstance(free, (int, float)):
        return Finding(name, "disk", "not known", needed, f"`geotrain nodes refresh {name}`", UNKNOWN)
    found = f"{gb(free)} {where}"
    if free >= needs.disk_gb:
        return Finding(name, "disk", found, needed, verdict=OK)
    if local:
        todo = ("free space there, or point GEOTRAIN_HOME at a larger disk"
                + (f"; {needs.dataset.name} alone takes {gb(needs.dataset_gb)}" if needs.dataset_gb >= 10 else ""))
    else:
        todo = (f"free {gb(needs.disk_gb - free)} on {name}, or deploy on nodes with more disk"
                + (f" ({needs.dataset.name} alone takes {gb(needs.dataset_gb)})" if needs.dataset_gb >= 10 else ""))
    return Finding(name, "disk", found, needed, todo)


def _memory(name: str, facts: dict, needs: Needs, local: bool) -> Finding:
    memory = facts.get("memory") or {}
    mb = memory.get("available_mb" if local else "total_mb")
    needed = f"{needs.memory_gib:,.1f} GiB for {needs.processes} worker{'s' if needs.processes != 1 else ''}"
    if not isinstance(mb, int) or mb <= 0:
        return Finding(name, "memory", "not known", needed, f"`geotrain nodes refresh {name}`", UNKNOWN)
    have = mb / 1024
    found = f"{have:,.1f} GiB {'available' if local else 'in total'}"
    if have >= needs.memory_gib:
        return Finding(name, "memory", found, needed, verdict=OK)
    todo = ("fewer workers (--workers), a smaller --size, or a machine with more memory" if local
            else "a smaller --size, or nodes with more memory")
    return Finding(name, "memory", found, needed, todo)


def _gpu_memory(name: str, facts: dict, needs: Needs) -> list[Finding]:
    if needs.vendor == "cpu" or needs.gpu_memory_gib <= 0:
        return []
    sizes = [g.get("memory_mb") for g in facts.get("gpus") or [] if isinstance(g, dict)]
    needed = f"{needs.gpu_memory_gib:,.1f} GiB per GPU"
    known = [s for s in sizes if isinstance(s, int)]
    if not known:
        return [Finding(name, "GPU memory", "not known", needed,
                        f"`geotrain nodes refresh {name}` (nvidia-smi/rocm-smi)", UNKNOWN)]
    smallest = min(known) / 1024
    found = f"{smallest:,.1f} GiB on its smallest GPU"
    if smallest >= needs.gpu_memory_gib:
        return [Finding(name, "GPU memory", found, needed, verdict=OK)]
    return [Finding(name, "GPU memory", found, needed,
                    "a smaller --size, or nodes with larger GPUs")]
