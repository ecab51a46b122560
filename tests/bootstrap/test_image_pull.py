"""The wizard's optional `images` step and the download failures that name the way forward.

A real image pull needs Docker Hub, which cannot be reached here: the rendered commands
per node and the step's place and events are checked. The download failures are real:
curl runs the k3s download command against a host that does not resolve (exit 6) and a
port nothing listens on (exit 7), through the node session a deploy uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.bootstrap import default_steps, failures, k3s, load_steps, versions
from core.bootstrap.deploy import build_plan, deploy
from core.bootstrap.session import CommandLog, NodeSession, StepFailed
from core.cli import main
from core.domain.images import UPSTREAM_IMAGES
from core.domain.records import Node
from core.errors import InvalidInput
from core.state.node_records import add_nodes
from core.state.store import Store
from tests.bootstrap.local_shell import LocalShell

GPUS = {"n0": [{"vendor": "nvidia", "name": "NVIDIA H100"}], "n1": [{"name": "AMD Instinct MI300X"}], "n2": []}
CTR = "ctr --address /run/containerd/containerd.sock -n k8s.io images"


def _nodes():
    add_nodes(Store(), [Node(name=name, host=f"198.51.100.{i + 1}", username="ubuntu", facts={"gpus": gpus})
                        for i, (name, gpus) in enumerate(GPUS.items())])


def test_the_images_step_is_optional_and_runs_before_the_kubeconfig():
    assert "images" not in default_steps()
    assert default_steps(prepull=True) == ["preflight", "containerd", "wireguard", "netmatrix", "k3s",
                                           "volcano", "images", "kubeconfig"]
    assert [s.name for s in load_steps(None, vpn=False, prepull=True)][-3:] == ["volcano", "images", "kubeconfig"]
    assert [s.name for s in load_steps(["kubeconfig", "images"])] == ["images", "kubeconfig"]


def test_each_node_pulls_its_vendor_s_image_unless_present(geotrain_home, capsys):
    _nodes()
    assert main(["clusters", "deploy", "c1", "--nodes", "n0,n1,n2", "--dry-run", "--only", "images"]) == 0
    out = capsys.readouterr().out
    for node, vendor in (("n0", "nvidia"), ("n1", "amd"), ("n2", "cpu")):
        section = out.split(f"== {node} ")[1].split("== ")[0]
        ref = "docker.io/" + UPSTREAM_IMAGES[vendor]
        assert f"[images] fact: {CTR} ls -q name=={ref} | grep -qxF {ref}" in section
        assert f"[images] change: {CTR} pull {ref}" in section


def test_a_cluster_image_is_pulled_instead_and_kept_for_its_workspaces(geotrain_home, capsys):
    _nodes()
    assert main(["clusters", "deploy", "c1", "--nodes", "n0,n1", "--dry-run", "--only", "images",
                 "--image", "registry.example.com/team/recipes:2.0"]) == 0
    out = capsys.readouterr().out
    assert f"{CTR} pull registry.example.com/team/recipes:2.0\n" in out
    assert f"{CTR} pull registry.example.com/team/recipes:2.0-rocm\n" in out
    assert main(["clusters", "deploy", "c1", "--nodes", "n0", "--dry-run", "--image", "Bad Image"]) == 2
    assert "not a valid container image name" in capsys.readouterr().err


def test_the_pull_reports_progress_per_node(geotrain_home):
    _nodes()
    plan = build_plan(Store(), "c1", ["n0", "n1"])
    plan.prepull = True
    events = []
    result = deploy(plan, only=["images"], dry_run=True, on_event=events.append)
    assert result.summary.ok
    for node, vendor in (("n0", "nvidia"), ("n1", "amd")):
        mine = [(e.progress, e.message, e.state) for e in events if e.node == node and e.step == "images"]
        assert any(m.startswith(f"pulling docker.io/{UPSTREAM_IMAGES[vendor]}") for _, m, _ in mine)
        assert mine[-1] == (1.0, "done", "done")


# --- failures that name the way forward -----------------------------------------------------
@pytest.mark.parametrize("code, meaning", [
    (6, "cannot resolve the download host"), (7, "cannot connect to the download host"),
    (28, "timed out"), (22, "HTTP error")])
def test_curl_exit_codes_are_explained(code, meaning):
    text = failures.explain_download("downloading k3s (amd64)", code, "amd64")
    assert text.startswith(f"downloading k3s (amd64) failed: exit code {code}: ") and meaning in text
    assert ("--k3s-bundle DIR" in text) == (code != 22)  # an HTTP error is not a missing network
    assert failures.explain_download("x", 99) == "x failed: exit code 99"


@pytest.mark.parametrize("url, code", [("https://k3s-download.invalid/k3s", 6), ("http://127.0.0.1:9/k3s", 7)])
def test_a_real_failed_k3s_download_says_what_it_means(tmp_path, monkeypatch, url, code):
    monkeypatch.setattr(versions, "k3s_urls", lambda version, arch: (url, url + ".sha256"))
    session = NodeSession("gpu1", LocalShell(), tmp_path / "gpu1.log", CommandLog(), [], sudo=False)
    command = k3s.download_command("v1.31.4+k3s1", "amd64", str(tmp_path / "k3s"), "ab" * 32)
    with pytest.raises(StepFailed) as failed:
        failures.download(session, command, "downloading k3s (amd64)", "amd64")
    message = str(failed.value)
    assert message.startswith(f"downloading k3s (amd64) failed: exit code {code}: the node cannot")
    assert "k3s-airgap-images-amd64.tar" in message and "--k3s-bundle DIR" in message
    assert not (tmp_path / "k3s").exists()


def test_the_bundle_dir_is_checked_where_it_is_given(tmp_path):
    with pytest.raises(InvalidInput, match="air-gap bundle .* has no k3s binary"):
        failures.check_bundle(str(tmp_path), "air-gap bundle")
    (tmp_path / "k3s").write_bytes(b"\x7fELF")
    (tmp_path / "k3s-airgap-images-amd64.tar.zst").write_bytes(b"")
    with pytest.raises(InvalidInput, match="has k3s-airgap-images-amd64.tar.zst but not k3s-airgap-images-amd64.tar"):
        failures.check_bundle(str(tmp_path))
    (tmp_path / "k3s-airgap-images-amd64.tar").write_bytes(b"")
    assert failures.check_bundle(str(tmp_path)) == Path(tmp_path).resolve()


def test_a_volcano_manifest_the_server_cannot_fetch_names_the_local_copy():
    from core.bootstrap.session import Result

    session = NodeSession("gpu0", None, None, CommandLog(), [], dry_run=True)
    offline = Result(1, "", 'error: unable to read URL "https://raw.githubusercontent.com/volcano-sh/volcano/'
                            'v1.11.2/installer/volcano-development.yaml", server reported 0 , status code=0\n'
                            "Get: dial tcp: lookup raw.githubusercontent.com: no such host\n")
    text = failures.apply_failure("applying the Volcano manifest", offline, session, downloaded=True)
    assert text.startswith("applying the Volcano manifest failed: Get: dial tcp: lookup")
    assert "--volcano-manifest FILE" in text
    refused = Result(1, "", 'Error from server (Forbidden): admission webhook denied the request\n')
    assert "--volcano-manifest" not in failures.apply_failure("applying", refused, session, downloaded=True)
    assert "--volcano-manifest" not in failures.apply_failure("applying", offline, session, downloaded=False)
