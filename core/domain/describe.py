"""Plain-text descriptions of ages, GPUs and nodes, shared by the headless commands and the app.

Pure functions of records, no UI imports: the CLI prints them, the app wraps them in literal
rich Text (a node's facts come from the server, so never markup, and never a terminal escape:
each row goes through core.domain.terminal_text).
"""

from __future__ import annotations

from core.domain.records import Node
from core.domain.terminal_text import printable


def age(seconds: float) -> str:
    """`45s`, `12m`, `3h`, `2d`: the largest whole unit (a clock running behind shows 0s)."""
    seconds = max(0, int(seconds))
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def gpu_summary(facts: dict, none: str = "—") -> str:
    """`8× A100-SXM4-80GB`: how many GPUs of the first kind (the vendor prefix adds nothing)."""
    found = facts.get("gpus") or []
    if not found:
        return none
    return f"{len(found)}× {str(found[0].get('name', '?')).removeprefix('NVIDIA ')}"


def gpu_list(facts: dict) -> str:
    """Every GPU with its memory and driver, for a node's details."""
    return ", ".join(f"#{g['index']} {g['name']} {g.get('memory_mb') or '?'} MiB (driver "
                     f"{g.get('driver') or '?'})" for g in facts.get("gpus", [])) or "none"


def endpoint(node: Node) -> str:
    return f"{node.username}@{node.host}:{node.port}"


def memory_gib(facts: dict, none: str = "—", unit: str = " GiB") -> str:
    total = facts.get("memory", {}).get("total_mb")
    return f"{total / 1024:.0f}{unit}" if total else none


def cpu(facts: dict, template: str = "{model}, {cores} cores") -> str:
    found = facts.get("cpu", {})
    return template.format(model=found.get("model", "?"), cores=found.get("cores", "?"))


def node_table_row(node: Node, none: str = "—") -> list[str]:
    """The pool table's cells after name/endpoint: datacenter, status, GPUs, CPU cores, memory."""
    f = node.facts
    return [printable(cell) for cell in (node.datacenter or none, node.status, gpu_summary(f, none),
                                         str(f.get("cpu", {}).get("cores", none)), memory_gib(f, none))]


def _sudo(f: dict) -> str:
    sudo = f.get("sudo", {})
    return "root" if sudo.get("root") else ("passwordless" if sudo.get("passwordless") else
                                            "needs a password / none")


def node_detail_rows(node: Node, wireguard_port: str = "unknown") -> list[tuple[str, str]]:
    """Everything known about a node, as (label, value) rows (`geotrain nodes show`);
    whether UDP 51820 is taken is judged by core.nodes, so the caller passes it in."""
    f = node.facts
    system, disk = f.get("system", {}), f.get("disk", {})
    docker, k3s = f.get("docker", {}), f.get("k3s", {})
    return [(label, printable(value)) for label, value in [
        ("name", node.name), ("endpoint", endpoint(node)),
        ("jump", node.jump or "-"), ("key", node.key_path or "SSH agent"),
        ("datacenter", node.datacenter or "-"), ("status", node.status), ("cluster", node.cluster or "-"),
        ("os", f"{system.get('os_name', '?')} ({system.get('system', '?')} {system.get('kernel', '')}, "
               f"{system.get('arch', '?')})"),
        ("cpu", cpu(f)),
        ("memory", f"{f.get('memory', {}).get('total_mb', 0) / 1024:.1f} GiB"),
        ("disk /", f"{disk.get('free_gb', '?')} GiB free of {disk.get('total_gb', '?')}"),
        ("gpus", gpu_list(f)),
        ("docker", "engine installed" if docker.get("engine") else ("CLI only" if docker.get("cli") else "no")),
        ("containerd", f.get("containerd", {}).get("version") or "no"),
        ("wireguard", "yes" if f.get("wireguard", {}).get("tools") else "no"),
        ("k3s", k3s.get("version") or ("yes" if k3s.get("installed") else "no")),
        ("sudo", _sudo(f)),
        ("udp 51820", wireguard_port),
        ("public ip", f.get("public_ip") or "unknown"),
    ]]


def node_panel_lines(node: Node) -> list[str]:
    """The app's shorter detail panel under the node's name, one fact a line."""
    f = node.facts
    system, wireguard = f.get("system", {}), f.get("wireguard", {})
    vpn = "kernel" if wireguard.get("kernel_module") else "wireguard-go" if wireguard.get("wireguard_go") else "missing"
    return [printable(line) for line in [endpoint(node),
            f"jump        {node.jump or '—'}", f"key         {node.key_path or 'SSH agent'}",
            f"cluster     {node.cluster or '—'}",
            f"os          {system.get('os_name', '?')} {system.get('arch', '')}",
            f"kernel      {system.get('kernel', '?')}",
            f"cpu         {cpu(f, '{model} ({cores} cores)')}",
            f"gpus        {gpu_summary(f)}",
            f"containerd  {f.get('containerd', {}).get('version') or 'not installed'}",
            f"wireguard   {vpn}",
            f"k3s         {f.get('k3s', {}).get('version') or 'not installed'}",
            f"public ip   {f.get('public_ip') or '—'}"]]
