"""Size and free space of the root filesystem and of /var/lib (where containerd and k3s
keep their data), in GiB; `df -P` is the portable form and prints a line per path."""

from __future__ import annotations

COMMAND = "df -Pk / /var/lib"


def parse(output: str) -> dict:
    sizes = [_sizes(line) for line in output.strip().splitlines()[1:]]
    sizes = [s for s in sizes if s]
    root = sizes[0] if sizes else (0.0, 0.0)
    var_lib = sizes[1] if len(sizes) > 1 else root  # recorded before /var/lib was asked
    return {"total_gb": root[0], "free_gb": root[1], "var_lib_free_gb": var_lib[1]}


def _sizes(line: str) -> tuple[float, float] | None:
    parts = line.split()
    if len(parts) < 4 or not parts[1].isdigit() or not parts[3].isdigit():
        return None
    return round(int(parts[1]) / 2**20, 1), round(int(parts[3]) / 2**20, 1)
