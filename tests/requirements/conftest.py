"""Shared pieces for the requirements tests: a registered Kubernetes cluster (FakeKubeAPI,
a stand-in for an API server, which cannot run here) whose two GPU nodes are in the node
pool with recorded facts, the Hub stand-in and a W&B stand-in."""

from __future__ import annotations

import time

import pytest

from core.domain.records import Node
from core.state.node_records import add_nodes
from core.state.store import Store
from tests.faults.hub_stand_in import HubStandIn
from tests.faults.wandb_stand_in import WandbStandIn
from tests.kubernetes.conftest import NODES, run, write_kubeconfig
from tests.kubernetes.fake_api_server import FakeKubeAPI

GATED = "ILSVRC/imagenet-1k"
GOOD_WANDB_KEY = "a1b2c3d4e5" * 4


def facts(var_lib_free_gb: float = 2000.0, memory_gb: int = 1024, gpu_mb: int = 81559) -> dict:
    """What the fact script records for an 8-GPU server (core.nodes.facts' shape)."""
    return {"disk": {"total_gb": 3500.0, "free_gb": var_lib_free_gb, "var_lib_free_gb": var_lib_free_gb},
            "memory": {"total_mb": memory_gb * 1024, "available_mb": memory_gb * 1000},
            "gpus": [{"vendor": "nvidia", "index": i, "name": "NVIDIA H100 80GB HBM3", "memory_mb": gpu_mb,
                      "driver": "550.54"} for i in range(8)],
            "gathered_at": time.time()}


@pytest.fixture(autouse=True)
def geotrain_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    for name in ("WANDB_API_KEY", "HF_TOKEN", "HF_ENDPOINT", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # never api.wandb.ai from a test
    return home


@pytest.fixture
def fake():
    api = FakeKubeAPI()
    api.nodes = NODES  # gpu-a and gpu-b (8 NVIDIA GPUs each), cpu-a, one cordoned
    api.url = api.start()
    yield api
    api.stop()


@pytest.fixture
def cluster(fake, tmp_path, capsys):
    """`mycluster`, registered from a kubeconfig; returns a function recording pool facts."""
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig",
                       write_kubeconfig(tmp_path / "kubeconfig", fake.url))
    assert code == 0, err

    def pool(**found) -> None:
        add_nodes(Store(), [Node(name=name, host=f"10.0.0.{i + 1}", username="root", facts=facts(**found))
                            for i, name in enumerate(("gpu-a", "gpu-b"))])
    return pool


@pytest.fixture
def hub(monkeypatch):
    """The Hub stand-in with a gated ImageNet: hf_granted may read it, hf_not_granted may not."""
    stand_in = HubStandIn()
    monkeypatch.setenv("HF_ENDPOINT", stand_in.start())
    stand_in.tokens = {"hf_granted", "hf_not_granted"}
    stand_in.gated[GATED] = {"hf_granted"}
    yield stand_in
    stand_in.stop()


@pytest.fixture
def wandb_api(monkeypatch):
    stand_in = WandbStandIn({GOOD_WANDB_KEY: "ada"})
    monkeypatch.setenv("WANDB_BASE_URL", stand_in.start())
    yield stand_in
    stand_in.stop()
