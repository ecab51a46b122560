"""k3s (or another Kubernetes node agent) already on the server."""

from __future__ import annotations

COMMAND = ("p=$(command -v k3s) && echo \"bin $p\" && k3s --version 2>/dev/null | head -n 1; "
           "[ -d /var/lib/rancher/k3s ] && echo 'data /var/lib/rancher/k3s'; "
           "p=$(command -v kubelet) && echo \"kubelet $p\"; true")


def parse(output: str) -> dict:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    version = next((ln.split()[2] for ln in lines if ln.startswith("k3s version ")
                    and len(ln.split()) > 2), None)
    # a leftover data dir without the binary is not an installation (uninstall keeps none)
    return {"installed": any(ln.startswith("bin ") for ln in lines), "version": version,
            "data_dir": any(ln.startswith("data ") for ln in lines),
            "other_kubelet": any(ln.startswith("kubelet ") for ln in lines)}
