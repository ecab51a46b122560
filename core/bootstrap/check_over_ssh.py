"""`clusters check NAME` on a cluster geotrain built over SSH (issue 43): on every node its GPUs'
ECC counters and Xids (core.domain.gpu_health) and, where the node's Python has torch, a burn-in of
each device; then, one pair at a time (parallel flows would share the links), a 2-rank gloo
all-reduce of the presets' payload between the two nodes' mesh addresses: the bus bandwidth per
link, beside the network matrix's probe.

Nothing is written to the nodes: the check's recipes modules travel over the SSH channel's stdin
with the run's arguments and the rendezvous store's token (core/bootstrap/stdin_modules.py), and run
in the node's own Python. The pair's first rank serves an authenticated recipes.elastic_store on its
mesh address for this one all-reduce; its token is fresh per check and never on a command line.
"""

from __future__ import annotations

import secrets
import shlex
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from core.bootstrap import stdin_modules
from core.bootstrap.plan import DeployContext, NodeTarget
from core.bootstrap.runner import Phase, Step
from core.domain.check_results import judge_node, parse_device_line, parse_link_line
from core.domain.gpu_health import (NVIDIA_HEALTH_COMMAND, ROCM_HEALTH_COMMAND, parse_nvidia_health,
                                    parse_rocm_health, parse_xids)
from core.domain.link_verdicts import link_entry
from core.domain.terminal_text import printable
from core.errors import InvalidInput

STORE_PORT = 29531  # the pair's rendezvous store, on the first node's mesh address, for one all-reduce
NO_TORCH = "burn-in needs torch on the node or the Volcano check job"
DEFAULT_PYTHONS = ("python3", "/usr/bin/python3")  # the login PATH's, then the system's
LINK_TIMEOUT_S = 240
STORE_WAIT_S = 60  # how long the pair's second rank retries the store (the first may still import torch)
Progress = Callable[[str], None]


def check_python(path: str | None) -> str | None:
    """--python: an absolute path of plain characters (it goes on the nodes' command lines)."""
    if path is None:
        return None
    if not stdin_modules.PYTHON_RE.fullmatch(path):
        raise InvalidInput(f"--python {printable(path)[:80]!r} is not an absolute path of letters, digits, '._+-/'",
                           "e.g. --python /opt/conda/bin/python3")
    return path


@dataclass
class CheckOptions:
    seconds: float
    payload_bytes: int
    python: str | None = None
    progress: Progress | None = None
    interface: str | None = None  # the mesh's interface, for gloo (None: no mesh)
    probes: dict = field(default_factory=dict)  # (a, b) -> the network matrix's {"ping_ms", "mbit_s"}
    token: bytes = field(default_factory=lambda: secrets.token_hex(32).encode())
    lock: threading.Lock = field(default_factory=threading.Lock)

    def say(self, line: str) -> None:
        if self.progress:
            with self.lock:
                self.progress(line)


GPU_FACTS = {"nvidia": shlex.join(NVIDIA_HEALTH_COMMAND), "rocm": shlex.join(ROCM_HEALTH_COMMAND),
             "dmesg": "dmesg | grep -F 'NVRM: Xid' | tail -n 200"}


def torch_command(python: str | None) -> str:
    """The first of the Pythons that imports torch, as `command -v` names it (exit 1: none)."""
    find = " ".join(shlex.quote(p) for p in ([python] if python else DEFAULT_PYTHONS))
    return (f"for p in {find}; do \"$p\" -c 'import torch' 2>/dev/null && {{ command -v \"$p\"; exit 0; }};"
            " done; exit 1")


def _node_facts(options: CheckOptions, target: NodeTarget) -> str | None:
    """GPU health in one round trip (with sudo where the deploy uses it: the kernel log may need it),
    then which Python has torch as the login user (who runs the ranks)."""
    options.say(f"{target.name}: GPU facts")
    probed = target.session.probe(GPU_FACTS, timeout=60)
    gpus = parse_nvidia_health(probed["nvidia"].stdout)
    xids = parse_xids(probed["dmesg"].stdout) if gpus else []
    gpus = gpus or parse_rocm_health(probed["rocm"].stdout)
    torch = target.session.fact(torch_command(options.python), timeout=60, sudo=False)
    found = torch.stdout.strip().splitlines()
    python = found[-1] if torch.ok and found and stdin_modules.PYTHON_RE.fullmatch(found[-1]) else None
    target.facts["check"] = {"gpus": gpus, "xids": xids, "python": python, "devices": [], "failed": None}
    return None


def _run_rank(options: CheckOptions, target: NodeTarget, argv: list[str], env: dict[str, str],
              timeout: float) -> tuple[str, str]:
    """Run recipes.cluster_check on the node from stdin; (stdout, the last error line or '')."""
    python = target.facts["check"]["python"]
    program = stdin_modules.payload(argv, env, options.token)
    target.session.note(f"check: {python} -c <stdin modules> {' '.join(argv)}")  # the token is in stdin only
    raw = target.session.shell.run(f"{shlex.quote(python)} -c {shlex.quote(stdin_modules.STUB)}",
                                   timeout=timeout, sudo=False, stdin=program)
    error = "" if raw.exit_code == 0 else \
        (raw.stderr.strip().splitlines() or [f"exit code {raw.exit_code}"])[-1][:200]
    return raw.stdout, printable(error)


def _burn_in(options: CheckOptions, target: NodeTarget) -> str | None:
    facts = target.facts["check"]
    if facts["python"] is None:
        facts["burn_in"] = NO_TORCH
        return None
    options.say(f"{target.name}: burn-in ({options.seconds:g} s per device)")
    out, error = _run_rank(options, target, ["--devices", "--seconds", repr(options.seconds)],
                           {"OMP_NUM_THREADS": "1"}, timeout=options.seconds * 8 + 180)
    facts["devices"] = [d for line in out.splitlines() if (d := parse_device_line(line))]
    if error or not facts["devices"]:
        facts["failed"] = f"burn-in failed: {error or 'no result'}"
    return None


def _link(options: CheckOptions, ctx: DeployContext, a: NodeTarget, b: NodeTarget) -> dict:
    if a.facts["check"]["python"] is None or b.facts["check"]["python"] is None:
        lacking = a.name if a.facts["check"]["python"] is None else b.name
        return link_entry(a.name, b.name, [], failed=f"not measured: no torch on {lacking}") | {"ok": None}
    address = ctx.plan.address(a.spec)
    env = {"WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "GEOTRAIN_ELASTIC_STORE_RETRY_S": str(STORE_WAIT_S)}
    if options.interface:
        env["GLOO_SOCKET_IFNAME"] = options.interface
    argv = ["--link", "--store", f"{address}:{STORE_PORT}", "--payload-bytes", str(options.payload_bytes)]
    options.say(f"link {a.name} - {b.name}: all-reduce of {options.payload_bytes / 1e6:.3g} MB")
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = [pool.submit(_run_rank, options, target, argv + (["--serve-store"] if rank == 0 else []),
                            {**env, "RANK": str(rank)}, LINK_TIMEOUT_S) for rank, target in enumerate((a, b))]
        outcomes = []
        for run in runs:
            try:
                outcomes.append(run.result())
            except Exception as exc:  # SSH dropped, timed out: the link fails, the check goes on
                outcomes.append(("", printable(f"{type(exc).__name__}: {exc}")[:200]))
    ranks = [parsed[0] for out, _ in outcomes if (parsed := [p for p in map(parse_link_line, out.splitlines()) if p])]
    errors = [f"{t.name}: {e}" for t, (_, e) in zip((a, b), outcomes) if e]
    return link_entry(a.name, b.name, ranks, failed="; ".join(errors) or None, probe=options.probes.get((a.name, b.name)))


def _links(options: CheckOptions, ctx: DeployContext, target: NodeTarget) -> str | None:
    """Every pair, one at a time (run from the first node's phase: the runner has no cross-node phase)."""
    names = [t.name for t in ctx.targets.values() if "check" in t.facts and not t.facts["check"]["failed"]]
    links = [_link(options, ctx, ctx.targets[a], ctx.targets[b])
             for i, a in enumerate(names) for b in names[i + 1:]]
    target.facts["check_links"] = links  # read back from the deploy's targets
    return None


def check_step(options: CheckOptions) -> Step:
    first_only = lambda ctx, alive: alive[:1]  # noqa: E731
    return Step("check", [Phase("facts", lambda ctx, t: _node_facts(options, t)),
                          Phase("burn-in", lambda ctx, t: _burn_in(options, t)),
                          Phase("links", lambda ctx, t: _links(options, ctx, t), first_only)])


def node_results(targets: dict[str, NodeTarget], failures: dict[str, str]) -> list[dict]:
    nodes = []
    for name, target in targets.items():
        facts = target.facts.get("check")
        if facts is None:
            nodes.append(judge_node(name, [], [], [], failed=f"not checked: {failures.get(name, 'unreachable')}"))
            continue
        nodes.append(judge_node(name, facts["devices"], facts["gpus"], facts["xids"], facts.get("burn_in"),
                                facts["failed"] or failures.get(name)))
    return nodes


def _probes(store, cluster: str) -> dict[tuple[str, str], dict]:
    """The network matrix's figures per unordered pair (the slower direction's rate)."""
    from core.state.cluster_records import network_matrix

    found: dict[tuple[str, str], dict] = {}
    for src, dst, latency, mbit in network_matrix(store, cluster):
        for key in ((src, dst), (dst, src)):
            have = found.get(key)
            if have is None or (mbit is not None and (have["mbit_s"] is None or mbit < have["mbit_s"])):
                found[key] = {"ping_ms": latency, "mbit_s": mbit}
    return found


def check_ssh_cluster(store, cluster: str, seconds: float, payload_bytes: int, python: str | None = None,
                      progress: Progress | None = None, shell_factory=None) -> dict:
    """Every node's facts and burn-in, then every pair's all-reduce; the verdict (not yet kept)."""
    from core.bootstrap.deploy import build_plan, deploy
    from core.domain.link_verdicts import cluster_verdict, datacenter_links

    python = check_python(python)  # before anything connects
    plan = build_plan(store, cluster, [])
    options = CheckOptions(seconds, payload_bytes, python, progress,
                           plan.interface if plan.vpn else None, _probes(store, cluster))
    done = deploy(plan, steps=[check_step(options)], record=False, shell_factory=shell_factory, store=store)
    failures = {f.node: f"{f.phase}: {f.message}" for f in done.summary.failures}
    nodes = node_results(done.targets, failures)
    links = next((t.facts["check_links"] for t in done.targets.values() if "check_links" in t.facts), [])
    datacenters = {spec.name: spec.datacenter for spec in plan.nodes}
    links += datacenter_links(links, datacenters)
    notes = [f"{n['name']}: {n['burn_in']}" for n in nodes if n.get("burn_in")]
    return cluster_verdict(cluster, "ssh", nodes, links, notes)
