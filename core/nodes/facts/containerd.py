"""containerd already installed (reused by the cluster wizard) and its version.

The version comes from the dpkg database when the package owns /usr/bin/containerd (a
`sed` over one file); only other installs pay for starting the Go binary, which was half
the fact script's CPU time on a server."""

from __future__ import annotations

COMMAND = ("p=$(command -v containerd) && echo \"bin $p\" && { "
           "v=; [ \"$p\" = /usr/bin/containerd ] && v=$(sed -n '/^Package: containerd\\(\\.io\\)\\{0,1\\}$/,/^$/"
           "s/^Version: //p' /var/lib/dpkg/status 2>/dev/null | head -n 1); "
           "if [ -n \"$v\" ]; then echo \"package $v\"; else containerd --version; fi; }; "
           "[ -S /run/containerd/containerd.sock ] && echo running; true")


def parse(output: str) -> dict:
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    version = None
    for line in lines:
        parts = line.split()
        if version is None and parts[0] == "package" and len(parts) == 2:
            version = parts[1].split(":", 1)[-1].split("-")[0]  # "[epoch:]1.6.20~ds1-1+deb12u3"
        elif version is None and parts[0] == "containerd" and len(parts) >= 3:
            version = parts[2].lstrip("v")  # "containerd <repo> 1.6.20~ds1 <rev>"
    return {"installed": any(ln.startswith("bin ") for ln in lines), "version": version,
            "running": "running" in lines}
