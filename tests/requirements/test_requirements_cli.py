"""`geotrain workspaces deploy` checks requirements before submitting: one table of what
fails where and what to do, exit 1 and nothing submitted (no workspace row, no process,
no Kubernetes object); `--force` submits anyway. Real CLI, SQLite, `kubernetes` client
over HTTP, huggingface_hub; the API server, the Hub and W&B are stand-ins."""

from __future__ import annotations

import json
import os

import psutil
import pytest

from core.requirements import needs
from core.state import paths
from tests.kubernetes.conftest import run
from tests.requirements.conftest import GOOD_WANDB_KEY

DEPLOY = ("workspaces", "deploy", "distributed-training")


def table_rows(err: str) -> dict[tuple[str, str], str]:
    """(node, check) -> the table line, from the CLI's stderr."""
    lines = err.splitlines()
    assert lines[0].split()[:3] == ["NODE", "CHECK", "FOUND"], err
    rows = {}
    for line in lines[1:]:
        if line.startswith(("local ", "gpu-", "all nodes ")):
            node = "all nodes" if line.startswith("all nodes") else line.split()[0]
            rows[(node, _check(line[len(node):]))] = line
    return rows


def _check(rest: str) -> str:
    for name in ("dataset access", "GPU memory", "W&B key", "disk", "memory", "facts"):
        if rest.strip().startswith(name):
            return name
    raise AssertionError(rest)


_CHILDREN_BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _children_before():
    """Processes this test run had already started (an earlier test's, a session's hosts):
    only new ones would be a submitted workspace."""
    _CHILDREN_BEFORE.clear()
    _CHILDREN_BEFORE.update(p.pid for p in psutil.Process().children(recursive=True))


def nothing_submitted(capsys, fake=None) -> None:
    code, out, _ = run(capsys, "workspaces", "list", "--json")
    assert code == 0 and json.loads(out) == []
    assert list(paths.workspaces_dir().iterdir()) == []
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in _CHILDREN_BEFORE] == []
    if fake is not None:
        assert fake.jobs() == [] and not [r for r in fake.requests if r[0] == "POST"]


def test_too_little_disk_on_the_nodes_is_a_table_and_nothing_is_submitted(cluster, fake, capsys):
    cluster(var_lib_free_gb=40.0)
    code, out, err = run(capsys, *DEPLOY, "--cluster", "mycluster", "--model", "wav2vec2", "--size", "base",
                         "--workers", "2")
    assert code == 1 and out == ""
    rows = table_rows(err)
    assert set(rows) == {("gpu-a", "disk"), ("gpu-b", "disk")}, err
    for node in ("gpu-a", "gpu-b"):
        assert "40 GB free under /var/lib" in rows[(node, "disk")]
        assert "dataset 250 GB" in rows[(node, "disk")] and "LibriSpeech alone takes 250 GB" in rows[(node, "disk")]
        assert f"on {node}" in rows[(node, "disk")]
    assert "2 requirements not met" in err and "--force" in err
    nothing_submitted(capsys, fake)


def test_force_submits_anyway_and_says_what_it_ignores(cluster, fake, capsys):
    cluster(var_lib_free_gb=40.0)
    code, out, err = run(capsys, *DEPLOY, "--cluster", "mycluster", "--model", "wav2vec2", "--size", "base",
                         "--workers", "2", "--force", "--json")
    assert code == 0, err
    assert "--force: deploying anyway, ignoring disk on gpu-a (40 GB free under /var/lib" in err
    assert "disk on gpu-b" in err
    workspace = json.loads(out)
    assert [j["metadata"]["name"] for j in fake.jobs()] == [f"gt-{workspace['id']}"]
    code, out, _ = run(capsys, "workspaces", "list", "--json")
    assert [w["id"] for w in json.loads(out)] == [workspace["id"]]


def test_too_little_memory_on_local_is_a_table_and_nothing_is_submitted(capsys):
    need = needs.needs_for({}, "gpt-neo", "1.3b", 200, 2, "cpu", local=True).memory_gib
    with open("/proc/meminfo") as meminfo:
        available_gib = next(int(line.split()[1]) for line in meminfo if line.startswith("MemAvailable")) / 2**20
    if available_gib >= need or os.path.exists("/dev/nvidia0"):
        pytest.skip(f"this machine has {available_gib:.0f} GiB available (or a GPU); the case needs less than {need}")
    code, out, err = run(capsys, *DEPLOY, "--model", "gpt-neo", "--size", "1.3b", "--workers", "2")
    assert code == 1 and out == ""
    line = table_rows(err)[("local", "memory")]
    assert "GiB available" in line and f"{need:,.1f} GiB for 2 workers" in line
    assert "fewer workers (--workers), a smaller --size" in line
    nothing_submitted(capsys)


@pytest.mark.parametrize("token, found, todo", [
    (None, "no HF token given", "accept the terms at {hub}/datasets/ILSVRC/imagenet-1k"),
    ("hf_unknown", "the Hub refused the token (HTTP 401)", "create a read token at {hub}/settings/tokens"),
    ("hf_not_granted", "refused: not granted (HTTP 403)", "accept the terms at {hub}/datasets/ILSVRC/imagenet-1k"),
])
def test_gated_imagenet_refused_by_the_hub_is_a_table_and_nothing_is_submitted(
        cluster, fake, hub, capsys, monkeypatch, token, found, todo):
    cluster()  # plenty of disk, memory and GPU memory: only the Hub's answer fails
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    code, out, err = run(capsys, *DEPLOY, "--cluster", "mycluster", "--model", "resnet50", "--size", "full",
                         "--workers", "2")
    assert code == 1 and out == ""
    rows = table_rows(err)
    assert list(rows) == [("all nodes", "dataset access")], err
    line = rows[("all nodes", "dataset access")]
    url = os.environ["HF_ENDPOINT"]
    assert found in line and todo.format(hub=url) in line
    if token:
        assert ("GET", "/api/datasets/ILSVRC/imagenet-1k/auth-check", f"Bearer {token}") in hub.requests
    else:
        assert hub.requests == []  # nothing to ask without a token
    nothing_submitted(capsys, fake)


def test_granted_imagenet_and_a_valid_key_deploy_without_a_table(cluster, fake, hub, wandb_api, capsys, monkeypatch):
    cluster()
    monkeypatch.setenv("HF_TOKEN", "hf_granted")
    code, out, err = run(capsys, *DEPLOY, "--cluster", "mycluster", "--model", "resnet50", "--size", "full",
                         "--workers", "2", "--wandb-token", GOOD_WANDB_KEY)
    assert code == 0, err
    assert "NODE" not in err and len(fake.jobs()) == 1
    assert wandb_api.requests == [GOOD_WANDB_KEY]


@pytest.mark.parametrize("key, found", [
    ("abc123", "malformed (6 characters, 40+ expected)"),
    ("local-" + "z" * 40, "refused by {wandb} (HTTP 401)"),
])
def test_bad_wandb_key_is_a_table_and_nothing_is_submitted(wandb_api, capsys, key, found):
    code, out, err = run(capsys, *DEPLOY, "--wandb-token", key, "--steps", "5")
    assert code == 1 and out == ""
    rows = table_rows(err)
    assert list(rows) == [("all nodes", "W&B key")], err
    assert found.format(wandb=os.environ["WANDB_BASE_URL"]) in rows[("all nodes", "W&B key")]
    assert key not in err
    nothing_submitted(capsys)


@pytest.mark.parametrize("server", ["https://api:sekrit@wandb.example", "https://wandb.example\nsekrit",
                                    "https://wandb.example:99999/sekrit"])
def test_a_w_and_b_server_that_is_not_a_plain_address_is_a_table_row_and_the_key_stays_here(
        wandb_api, capsys, monkeypatch, server):
    """Before: urllib's InvalidURL escaped as a traceback that showed the password, or the key went to
    whatever the value named; now the address is judged first (no request is made) and never repeated."""
    monkeypatch.setenv("WANDB_BASE_URL", server)
    code, out, err = run(capsys, *DEPLOY, "--wandb-token", GOOD_WANDB_KEY, "--steps", "5")
    assert code == 1 and out == ""
    rows = table_rows(err)
    assert list(rows) == [("all nodes", "W&B key")], err
    assert "WANDB_BASE_URL is not an http(s) address" in rows[("all nodes", "W&B key")]
    assert "sekrit" not in err and GOOD_WANDB_KEY not in err and "Traceback" not in err
    nothing_submitted(capsys)


def test_stale_facts_are_refreshed_over_ssh_and_an_unreachable_node_is_named(cluster, fake, capsys):
    from core.state.node_records import get_node, update_node
    from core.state.store import Store

    cluster()
    store = Store()
    node = get_node(store, "gpu-a")
    node.host, node.port = "127.0.0.1", 9  # nothing listens: the refresh's SSH connect is refused
    node.facts["gathered_at"] = 0
    update_node(store, node)
    code, out, err = run(capsys, *DEPLOY, "--cluster", "mycluster", "--workers", "2", "--json")
    assert code == 0, err  # an unchecked node warns; it does not refuse
    line = table_rows(err)[("gpu-a", "facts")]
    assert "stale; refresh failed" in line and "geotrain nodes refresh gpu-a" in line
    assert get_node(store, "gpu-a").status == "UNREACHABLE"
