"""A private --image registry (issue 41, item 4): the credential kept like the other tokens
(0600 secret store, never argv, DB, manifests' shown text or the trainer's env), one
kubernetes.io/dockerconfigjson Secret per workspace created before the Job and deleted with
it, and every pod naming it in imagePullSecrets (Kubernetes docs, "Images": Specifying
imagePullSecrets on a Pod). Through the real CLI, service, SQLite and `kubernetes` client
against FakeKubeAPI, a stand-in for the API server (none runs here)."""

from __future__ import annotations

import base64
import json

import pytest

from core.kubernetes.registry_auth import registry_host
from core.state import paths
from tests.kubernetes.conftest import run

IMAGE = "registry.example.com:5000/team/train:1.0"
PASSWORD = "pw-Very-Secret-42"
DEPLOY = ("workspaces", "deploy", "distributed-training", "--cluster", "mycluster", "--model", "gpt-neo",
          "--size", "tiny", "--workers", "2", "--steps", "5", "--yes")


@pytest.fixture
def registered(fake, kubeconfig, capsys):
    code, _, err = run(capsys, "clusters", "add-kubernetes", "mycluster", "--kubeconfig", kubeconfig)
    assert code == 0, err
    return fake


@pytest.mark.parametrize("image, host", [
    # distribution/reference normalize.go splitDockerDomain: a first part with '.' or ':' or
    # 'localhost' is the registry; anything else is Docker Hub
    ("pytorch/pytorch:2.7.1", "docker.io"), ("ubuntu", "docker.io"), ("ghcr.io/org/img:1", "ghcr.io"),
    ("localhost/img", "localhost"), ("reg:5000/img", "reg:5000"), (IMAGE, "registry.example.com:5000")])
def test_the_registry_an_image_names(image, host):
    assert registry_host(image) == host


def test_a_private_image_gets_its_own_pull_secret_made_first_and_deleted_with_it(registered, capsys, monkeypatch):
    fake = registered
    monkeypatch.setenv("GEOTRAIN_REGISTRY_PASSWORD", PASSWORD)
    code, out, err = run(capsys, *DEPLOY, "--image", IMAGE, "--registry-user", "bob", "--json")
    assert code == 0, err
    ws = json.loads(out)["id"]
    job = next(o for (kind, _, _), o in fake.objects.items() if kind == "jobs")
    name = f"{job['metadata']['name']}-registry"
    secret = fake.objects[("secrets", "default", name)]
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(secret["stringData"][".dockerconfigjson"])
    assert config == {"auths": {"registry.example.com:5000": {
        "username": "bob", "password": PASSWORD, "auth": base64.b64encode(f"bob:{PASSWORD}".encode()).decode()}}}
    for task in job["spec"]["tasks"]:
        assert task["template"]["spec"]["imagePullSecrets"] == [{"name": name}]
    watcher = next(o for (kind, _, _), o in fake.objects.items() if kind == "deployments")
    assert watcher["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE  # the watcher runs it too
    assert watcher["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": name}]
    posts = [path for method, path, _ in fake.requests if method == "POST"]
    secret_at = posts.index("/api/v1/namespaces/default/secrets")
    assert secret_at < next(i for i, p in enumerate(posts) if p.endswith("/jobs"))  # the secret exists before any pod
    assert secret_at < next(i for i, p in enumerate(posts) if p.endswith("/deployments"))
    assert not [n for (kind, _, n), o in fake.objects.items()  # never the trainer's env
                if kind in ("secrets", "configmaps", "jobs") and "GEOTRAIN_REGISTRY_AUTH" in json.dumps(o)]
    assert PASSWORD not in json.dumps(job)
    for db in paths.database_path().parent.glob(paths.database_path().name + "*"):  # the WAL too
        assert PASSWORD.encode() not in db.read_bytes()
    assert (paths.secrets_path().stat().st_mode & 0o777) == 0o600
    code, _, err = run(capsys, "workspaces", "delete", ws, "--yes")
    assert code == 0, err
    assert ("secrets", "default", name) not in fake.objects


def test_the_dry_run_shows_the_pull_secret_without_the_password(registered, capsys, monkeypatch):
    monkeypatch.setenv("GEOTRAIN_REGISTRY_PASSWORD", PASSWORD)
    code, out, err = run(capsys, *DEPLOY, "--image", IMAGE, "--registry-user", "bob", "--dry-run")
    assert code == 0, err
    assert "type: kubernetes.io/dockerconfigjson" in out and "imagePullSecrets" in out
    assert PASSWORD not in out and PASSWORD not in err


def test_registry_user_without_a_private_image_or_password_is_refused_in_one_line(registered, capsys, monkeypatch):
    monkeypatch.delenv("GEOTRAIN_REGISTRY_PASSWORD", raising=False)
    code, _, err = run(capsys, *DEPLOY, "--registry-user", "bob")
    assert code == 2 and "--registry-user is for a private --image" in err and len(err.strip().splitlines()) <= 2
    code, _, err = run(capsys, *DEPLOY, "--image", IMAGE, "--registry-user", "bob")
    assert code == 2 and "no password for --registry-user bob" in err
    monkeypatch.setenv("GEOTRAIN_REGISTRY_PASSWORD", "has space")
    code, _, err = run(capsys, *DEPLOY, "--image", IMAGE, "--registry-user", "bob")
    assert code == 2 and "USER:PASSWORD" in err and "has space" not in err
    assert registered.jobs() == []


def test_a_registry_user_with_a_colon_is_refused_not_split(registered, capsys, monkeypatch):
    """'bob:x' would have become user bob with password 'x:<password>' (a pull that fails later, in the cluster)."""
    monkeypatch.setenv("GEOTRAIN_REGISTRY_PASSWORD", PASSWORD)
    code, _, err = run(capsys, *DEPLOY, "--image", IMAGE, "--registry-user", "bob:x")
    assert code == 2 and "is not a plain user name" in err and PASSWORD not in err
    assert registered.jobs() == [] and not [k for k in registered.objects if k[0] == "secrets"]
