"""Shared pieces for the Kubernetes tests: the Volcano schema, node sets, specs, a temp home."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from core.cli import main
from core.domain.records import WorkspaceSpec
from core.kubernetes.node_groups import NodeGroup
from tests.kubernetes.fake_api_server import FakeKubeAPI

REPO = Path(__file__).resolve().parents[2]
VOLCANO_DIR = Path(__file__).resolve().parent / "fixtures" / "volcano"  # vendored, see SOURCE.md
JOB_CRD = VOLCANO_DIR / "batch.volcano.sh_jobs.yaml"

MODELS = ("gpt-neo", "gpt-neo-x", "gcn", "resnet50", "resnet101", "wav2vec2")

# Two datacenters' worth of unlike nodes: the set every manifest is rendered for.
HETEROGENEOUS = [
    NodeGroup("nvidia", 8, ("dc1-h100-a", "dc1-h100-b")),
    NodeGroup("nvidia", 4, ("dc2-a10-a",)),
    NodeGroup("amd", 8, ("dc2-mi300-a", "dc2-mi300-b")),
    NodeGroup("cpu", 0, ("dc3-cpu-a", "dc3-cpu-b")),
]


def presets() -> tuple[str, ...]:
    """Preset names from recipes/presets.yaml (the one table)."""
    data = yaml.safe_load((REPO / "recipes" / "presets.yaml").read_text()) or {}
    return tuple(data.get("presets", data))


@pytest.fixture(scope="session")
def job_validator():
    """Draft 7 validator for the Volcano Job CRD's openAPIV3Schema."""
    from jsonschema import Draft7Validator

    crd = yaml.safe_load(JOB_CRD.read_text())
    return Draft7Validator(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])


def make_spec(**overrides) -> WorkspaceSpec:
    fields = dict(cluster="dc", model="gpt-neo", size="tiny", preset="low", workers=2, steps=20)
    fields.update(overrides)
    return WorkspaceSpec(**fields)


@pytest.fixture
def geotrain_home(tmp_path, monkeypatch):
    """A private state directory (SQLite + secrets) for one test."""
    home = tmp_path / "home"
    monkeypatch.setenv("GEOTRAIN_HOME", str(home))
    return home


# Nodes the fake API server lists: two NVIDIA boxes, one CPU box, one cordoned.
NODES = [
    {"metadata": {"name": "gpu-a"}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}},
    {"metadata": {"name": "gpu-b"}, "status": {"allocatable": {"nvidia.com/gpu": "8", "cpu": "96"}}},
    {"metadata": {"name": "cpu-a"}, "status": {"allocatable": {"cpu": "32"}}},
    {"metadata": {"name": "cordoned"}, "spec": {"unschedulable": True}, "status": {"allocatable": {}}},
]


def write_kubeconfig(path, server: str) -> str:
    path.write_text(f"""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster: {{server: "{server}"}}
users:
- name: dev
  user: {{token: not-a-real-token}}
contexts:
- name: fake-ctx
  context: {{cluster: fake, user: dev, namespace: default}}
current-context: fake-ctx
""")
    return str(path)


@pytest.fixture
def fake():
    """FakeKubeAPI: a stand-in for a real Kubernetes API server, which cannot run here."""
    api = FakeKubeAPI()
    api.nodes = NODES
    api.url = api.start()
    yield api
    api.stop()


@pytest.fixture
def kubeconfig(fake, tmp_path, geotrain_home) -> str:
    return write_kubeconfig(tmp_path / "kubeconfig", fake.url)


def run(capsys, *argv) -> tuple[int, str, str]:
    """The CLI in-process: exit code, stdout, stderr."""
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err
