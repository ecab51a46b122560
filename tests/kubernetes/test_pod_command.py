"""The shell command a rendered pod runs, run for real: two "pods" on this machine.

Each process gets the manifest's own script and environment; only what a cluster
provides is stood in: the master's DNS name is `localhost`, POD_IP is 127.0.0.1, the
rendezvous port is a free one, and `recipes.train` is a tiny stand-in that does one
gloo all-reduce (the real recipe is tested with the recipes).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from core.kubernetes.manifests import RDZV_PORT, render_volcano_job
from core.domain.records import Cluster
from core.kubernetes.node_groups import NodeGroup
from tests.kubernetes.conftest import make_spec

STAND_IN_TRAIN = textwrap.dedent("""
    import argparse, os
    import torch, torch.distributed as dist
    parser = argparse.ArgumentParser()
    parser.add_argument("--config")
    args = parser.parse_args()
    dist.init_process_group(os.environ["GEOTRAIN_DIST_BACKEND"])
    value = torch.ones(1) * (dist.get_rank() + 1)
    dist.all_reduce(value)
    print(f"rank {dist.get_rank()}/{dist.get_world_size()} sum {value.item():.0f} config {args.config}", flush=True)
    dist.destroy_process_group()
""")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _pod_process(task: dict, workdir, port: int, **env_overrides) -> subprocess.Popen:
    container = task["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    env.update(POD_IP="127.0.0.1", GEOTRAIN_RDZV_HOST="localhost", PATH=os.environ["PATH"],
               PYTHONPATH=str(workdir), HOME=str(workdir))
    env.update(env_overrides)
    shell, flag, script = container["command"]
    script = script.replace(f":{RDZV_PORT}", f":{port}")
    return subprocess.Popen([shell, flag, script], cwd=workdir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture
def job(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "__init__.py").write_text("")
    (tmp_path / "recipes" / "train.py").write_text(STAND_IN_TRAIN)
    groups = [NodeGroup("cpu", 0, ("node-a", "node-b"))]
    return render_volcano_job("ws-cmd", make_spec(workers=2), Cluster("dc", "geotrain"), groups)


@pytest.mark.slow
def test_master_and_worker_commands_rendezvous_and_train(job, tmp_path):
    port = _free_port()
    master, worker = job["spec"]["tasks"]
    procs = [_pod_process(master, tmp_path, port), _pod_process(worker, tmp_path, port)]
    outputs = []
    for proc in procs:
        out, _ = proc.communicate(timeout=120)
        outputs.append(out)
        assert proc.returncode == 0, out
    ranks = sorted(line for out in outputs for line in out.splitlines() if line.startswith("rank "))
    assert ranks == ["rank 0/2 sum 3 config /etc/geotrain/config.yaml",
                     "rank 1/2 sum 3 config /etc/geotrain/config.yaml"]


def test_a_missing_headless_service_fails_after_the_bounded_wait(job, tmp_path):
    proc = _pod_process(job["spec"]["tasks"][1], tmp_path, _free_port(),
                        GEOTRAIN_RDZV_HOST="gt-ws-cmd-master-0.no-such-domain.invalid",
                        GEOTRAIN_RDZV_WAIT_S="1")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1
    assert "did not resolve within 1s" in out and "svc plugin" in out
