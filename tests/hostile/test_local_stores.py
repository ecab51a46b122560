"""Issue 38, finding 1: nothing on the network drives a local workspace.

torchrun --standalone's stores listened on every interface and its c10d rendezvous
unpickled what a peer wrote (the control test below still runs code that way). A local
workspace now has no store on any port: its workers meet in a FileStore in the run's
0700 `stores/` directory and their collectives bind loopback. Each kind of local workspace
(a fixed group, the elastic pool) is probed from a network-namespace peer, attacked
through every port it has, and its store tried as another user.
"""

from __future__ import annotations

import ipaddress
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.backends.local.supervisor import workspace_processes
from core.workspaces import DeployRequest, WorkspaceService
from tests import testhosts
from tests.faults.faults import wait_for

ROOT = Path(__file__).resolve().parents[2]
STEP = re.compile(r"\bstep\s+(\d+)")
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
pytestmark = pytest.mark.slow


def _attack(host: str, port: int, marker: Path) -> str:
    try:
        out = subprocess.run([sys.executable, "-m", "tests.hostile.store_attack", host, str(port), str(marker)],
                             cwd=ROOT, capture_output=True, text=True, timeout=20)
    except subprocess.TimeoutExpired:  # a port that is not a store (gloo) never answers the client
        return "no store: no answer"
    return out.stdout.strip() or out.stderr.strip()[-300:]


def _listening(pids: list[int]) -> set[tuple[str, int]]:
    found = set()
    for pid in pids:
        try:
            found |= {(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("inet")
                      if c.status == psutil.CONN_LISTEN}
        except psutil.Error:
            continue
    return found


def test_the_attack_runs_code_through_torchrun_standalone(tmp_path):
    """The control: the attack is real against what local workspaces used to run."""
    script = tmp_path / "wait.py"
    script.write_text("import time, torch.distributed as d\nd.init_process_group('gloo')\ntime.sleep(90)\n")
    marker = tmp_path / "ran"
    agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone",
                              "--nproc-per-node", "2", "--max-restarts", "0", str(script)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        seen: set[tuple[str, int]] = set()

        def attacked() -> bool:
            ports = _listening([agent.pid])
            seen.update(ports)
            for _, port in ports:
                _attack("127.0.0.1", port, marker)
            return marker.exists()
        wait_for(attacked, 60, "the planted pickle to run")
        wildcard = [ip for ip, _ in seen if not ipaddress.ip_address(ip).is_loopback]
        assert wildcard, "torchrun's store listened on loopback only: the control no longer holds"
    finally:
        os.killpg(agent.pid, 9)
        agent.wait()


@pytest.fixture
def geotrain_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    for name in ("WANDB_API_KEY", "HF_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    return home


@pytest.fixture
def peer():
    reason = testhosts.skip_reason()
    if reason:
        pytest.skip(reason)
    with testhosts.make_hosts(1, prefix="gtst", subnet="10.219.0.0/24") as hosts:
        yield hosts[0]


def _reaches(peer, port: int) -> bool:
    probe = peer.run(f"timeout 3 bash -c 'exec 3<>/dev/tcp/10.219.0.1/{port}'", check=False)
    return probe.returncode == 0


def _open_path_to(path: Path, top: Path) -> None:
    """Let others traverse the directories from `top` down to `path` (the test's own temp
    dirs), so that only the store directory's own mode stands between them and the store."""
    for folder in [*reversed(path.parents), path]:
        if folder == top or top in folder.parents:
            folder.chmod(folder.stat().st_mode | 0o011)
    for folder in top.parents:
        if folder.stat().st_mode & 0o001 == 0:
            folder.chmod(folder.stat().st_mode | 0o001)


def _as_nobody(command: str) -> subprocess.CompletedProcess:
    return subprocess.run([*NOBODY, "sh", "-c", command], capture_output=True, text=True, timeout=30)


def _last_step(run_dir: Path) -> int:
    text = (run_dir / "logs" / "worker-0.log").read_text(errors="replace")
    steps = [int(m.group(1)) for m in STEP.finditer(text)]
    return steps[-1] if steps else -1


@pytest.mark.root
@pytest.mark.parametrize("preset, mode", [("none", "group"), ("medium", "elastic")])
def test_no_port_or_store_of_a_local_workspace_is_reachable(geotrain_home, tmp_path, peer, preset, mode):
    service = WorkspaceService()
    ws = service.deploy(service.build_spec(DeployRequest(preset=preset, steps=100000)), {})
    run_dir = Path(ws.run_dir)
    marker = tmp_path / "ran"
    try:
        assert json.loads((run_dir / "launch.json").read_text())["mode"] == mode
        seen: set[tuple[str, int]] = set()

        def sockets() -> bool:  # the elastic pool's groups live for one outer step: sample a while
            seen.update(_listening([p.pid for p in workspace_processes(ws.id)]))
            return len(seen) >= 2 and _last_step(run_dir) >= 0
        wait_for(sockets, 240, "the workers' collectives to listen and training to start")
        assert all(ipaddress.ip_address(ip).is_loopback for ip, _ in seen), seen

        with socket.create_server(("0.0.0.0", 0)) as wide:  # the probe does reach a port that is open
            assert _reaches(peer, wide.getsockname()[1])
        assert [port for _, port in seen if _reaches(peer, port)] == []

        seen.update(_listening([p.pid for p in workspace_processes(ws.id)]))
        answers = {port: _attack("127.0.0.1", port, marker) for _, port in seen}
        assert all(a.startswith("no store") for a in answers.values()), answers
        assert not marker.exists()

        stores = run_dir / "stores"
        assert (stores.stat().st_mode & 0o777) == 0o700 and sorted(p.name for p in stores.iterdir())
        store = next(stores.iterdir())
        _open_path_to(run_dir, geotrain_home)
        assert _as_nobody(f"ls {run_dir / 'logs'}").returncode == 0  # others can reach the run dir now
        for attempt in (f"ls {stores}", f"cat {store}", f"echo planted >> {store}",
                        f"ln -s /tmp {stores / 'link'}"):
            denied = _as_nobody(attempt)
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, (attempt, denied)

        before = _last_step(run_dir)
        wait_for(lambda: _last_step(run_dir) > before, 120, "training to go on after the attacks")
        assert service.status(ws.id).status == "RUNNING"
    finally:
        service.delete(ws.id)


def test_no_local_code_path_starts_a_tcp_store_or_torchrun():
    """The class stays closed: a TCPStore or torchrun launcher in the local backend, or in a
    recipe module a local worker runs, would listen on every interface again. The pods'
    torchrun agent store (recipes.distributed, only under TORCHELASTIC_USE_AGENT_STORE, fenced
    by the Job's NetworkPolicy) and the emulated-WAN bench (its ranks run in network namespaces
    the bench makes, as root, on a bridge of its own) are the only places allowed; the other
    benchmarks start their ranks as a local workspace does (recipes.bench.local_group)."""
    allowed = {"recipes/distributed.py", "recipes/bench/wan.py"}
    pattern = re.compile(r"TCPStore\(|[\"']torch\.distributed\.run[\"']|[\"'](torchrun|--standalone)[\"']|tcp://")
    offenders = []
    for folder in ("core/backends/local", "recipes"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            name = str(path.relative_to(ROOT))
            if name in allowed:
                continue
            offenders += [f"{name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
                          if pattern.search(line) and not line.lstrip().startswith("#")]
    assert offenders == [], "a local workspace meets in recipes.private_store's FileStore, never on a port"
    source = (ROOT / "recipes/distributed.py").read_text()
    assert source.count("TCPStore(") == 1 and 'TORCHELASTIC_USE_AGENT_STORE") != "True"' in source
