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
import textwrap
import time

import pytest

from core.domain import run_events
from core.kubernetes.manifests import render_volcano_job
from core.domain.records import Cluster
from core.kubernetes.node_groups import NodeGroup
from tests.kubernetes.conftest import make_spec

# torchrun's static group (DDP, or recovery.elastic false); elastic pods: tests/kubernetes/test_elastic_pods.py
TORCHRUN = {"recovery": {"elastic": False}}

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
    deps = workdir / "pydeps" / "prepared"  # the node's dependency cache, prepared by an earlier pod
    (deps / ".complete").parent.mkdir(parents=True, exist_ok=True)
    (deps / ".complete").touch()
    env.update(POD_IP="127.0.0.1", GEOTRAIN_RDZV_HOST="localhost", GEOTRAIN_RDZV_PORT=str(port),
               PATH=os.environ["PATH"], GEOTRAIN_DEPS_DIR=str(deps),
               PYTHONPATH=str(workdir), HOME=str(workdir))
    env.update(env_overrides)
    shell, flag, script = container["command"]
    return subprocess.Popen([shell, flag, script], cwd=workdir, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.fixture
def job(tmp_path):
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "__init__.py").write_text("")
    (tmp_path / "recipes" / "train.py").write_text(STAND_IN_TRAIN)
    groups = [NodeGroup("cpu", 0, ("node-a", "node-b"))]
    return render_volcano_job("ws-cmd", make_spec(workers=2, **TORCHRUN), Cluster("dc", "geotrain"), groups)


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


# --- 17.6: a master that starts late (a slow image pull far away) ------------------------
# The store's read_timeout is cut from 120 s to 5 s here, so that a worker that started
# torchrun as soon as the master's name resolved (the old DNS-only wait) would fail within
# the test while the master is still "pulling" (20 s); the endpoint wait must carry it over.
SHORT_READ_TIMEOUT = ("read_timeout=120", "read_timeout=5")
MASTER_DELAY_S = 20


@pytest.fixture
def three_dc_job(tmp_path):
    """A 3-datacenter job: one CPU node in each, so master + two worker tasks (3 pods)."""
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "__init__.py").write_text("")
    (tmp_path / "recipes" / "train.py").write_text(STAND_IN_TRAIN)
    groups = [NodeGroup("cpu", 0, (f"dc{i}-cpu",)) for i in (1, 2, 3)]
    return render_volcano_job("ws-3dc", make_spec(workers=3, **TORCHRUN), Cluster("dc", "geotrain"), groups)


def _short_timeout(task: dict) -> dict:
    task = {**task, "template": {**task["template"], "spec": dict(task["template"]["spec"])}}
    container = dict(task["template"]["spec"]["containers"][0])
    shell, flag, script = container["command"]
    assert SHORT_READ_TIMEOUT[0] in script
    container["command"] = [shell, flag, script.replace(*SHORT_READ_TIMEOUT)]
    task["template"]["spec"]["containers"] = [container]
    return task


@pytest.mark.slow
def test_workers_wait_for_a_late_master_endpoint_and_the_rendezvous_succeeds(three_dc_job, tmp_path):
    port = _free_port()
    tasks = [_short_timeout(t) for t in three_dc_job["spec"]["tasks"]]
    assert [t["name"] for t in tasks][0] == "master" and len(tasks) == 3
    workers = [_pod_process(task, tmp_path, port) for task in tasks[1:]]
    try:
        time.sleep(MASTER_DELAY_S)  # the master's image is still being pulled
        assert all(w.poll() is None for w in workers), "a worker gave up before the master started"
        master = _pod_process(tasks[0], tmp_path, port)
        outputs = [p.communicate(timeout=180)[0] for p in (master, *workers)]
    finally:
        for proc in workers:
            proc.kill()
    for proc, out in zip((master, *workers), outputs):
        assert proc.returncode == 0, out
    for out in outputs[1:]:
        assert f"waiting for the rendezvous at localhost:{port}" in out
        assert f"waiting for peers, missing master (at localhost:{port})" in map(run_events.readable,
                                                                                 out.splitlines())
    ranks = sorted(line.split(" config")[0] for out in outputs for line in out.splitlines()
                   if line.startswith("rank "))
    assert ranks == ["rank 0/3 sum 6", "rank 1/3 sum 6", "rank 2/3 sum 6"]


@pytest.mark.slow
def test_a_dns_only_wait_would_have_crashed_on_the_late_master(three_dc_job, tmp_path):
    """The control: with only the name resolved (as before), torchrun starts at once and the
    store connect expires after read_timeout while the master is still absent."""
    worker = _short_timeout(three_dc_job["spec"]["tasks"][1])
    proc = _pod_process(worker, tmp_path, _free_port(), GEOTRAIN_RDZV_IS_HOST="1")  # = DNS-only wait
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode != 0
    assert "waiting for the rendezvous" not in out and "rank " not in out
    assert "RendezvousConnectionError" in out or "timed out" in out.lower(), out


def test_a_master_that_never_listens_fails_the_worker_after_the_bounded_wait(three_dc_job, tmp_path):
    proc = _pod_process(three_dc_job["spec"]["tasks"][1], tmp_path, _free_port(), GEOTRAIN_RDZV_WAIT_S="2")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 1
    assert "nothing listened at localhost:" in out and "within 2s" in out and "torchrun" not in out.lower()


def test_the_wait_is_bounded_by_the_join_timeout(three_dc_job):
    container = three_dc_job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]
    env, script = {e["name"]: e.get("value") for e in container["env"]}, container["command"][2]
    assert f"join_timeout={env['GEOTRAIN_RDZV_WAIT_S']}," in script
    assert env["GEOTRAIN_RDZV_IS_HOST"] == "0" and "getent" not in script


def test_an_image_without_python_says_so_in_one_line(three_dc_job, tmp_path):
    proc = _pod_process(three_dc_job["spec"]["tasks"][1], tmp_path, _free_port(), PATH=str(tmp_path))
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1 and out == "geotrain: the image has no python\n"
