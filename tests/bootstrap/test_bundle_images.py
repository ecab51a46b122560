"""Images from the air-gap bundle's images/ folder, imported on each node (issue 41 item 3).

A real containerd (the Debian package, run as root with its own root, state and socket) imports
the archives geotrain streams, with the command the k3s step runs: `ctr -n k8s.io images import
--platform linux/<arch>` (containerd's ctr, the same import k3s documents for its own air-gap
images: docs.k3s.io/installation/airgap). Archives: OCI image layout (index.json with the
io.containerd.image.name annotation, what `ctr images export` writes) and docker-archive
(manifest.json RepoTags, what `docker save` writes).
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest

from core.bootstrap import bundle_images, offline, versions
from core.bootstrap.plan import ClusterPlan, DeployContext, NodeSpec, NodeTarget
from core.bootstrap.session import CommandLog, NodeSession, StepFailed
from core.domain.images import NGC_PYTORCH, UPSTREAM_IMAGES, qualified
from tests.bootstrap.image_archives import docker_archive, oci_archive
from tests.bootstrap.local_shell import LocalShell
from tests.bootstrap.test_offline import _dry_run
from tests.bootstrap.test_upstream_rules import _node

VOLCANO = f"docker.io/volcanosh/vc-scheduler:{versions.volcano_for(versions.K3S_VERSION)}"


def _bundle(tmp_path, docker=True):
    """k3s's files, Volcano's scheduler image, and a training image per CPU (the amd64 one as
    `docker save` names it, or as an OCI archive a real containerd can import)."""
    bundle = tmp_path / "bundle"
    (bundle / "images").mkdir(parents=True)
    for arch in ("amd64", "arm64"):
        (bundle / versions.k3s_asset(arch)).write_bytes(b"k3s")
        (bundle / versions.airgap_images(arch)).write_bytes(b"tar")
    oci_archive(bundle / "images" / "volcano.tar", VOLCANO, "amd64")
    train = bundle / "images" / "train-amd64.tar"
    if docker:
        docker_archive(train, [UPSTREAM_IMAGES["nvidia"]])
    else:
        oci_archive(train, qualified(UPSTREAM_IMAGES["nvidia"]), "amd64")
    oci_archive(bundle / "images" / "train-arm64.tar", NGC_PYTORCH, "arm64")
    return bundle


def test_an_archive_names_its_images_or_is_refused_in_one_line(tmp_path):
    bundle = _bundle(tmp_path)
    assert bundle_images.archive_refs(bundle / "images" / "volcano.tar") == [VOLCANO]
    assert bundle_images.archive_refs(bundle / "images" / "train-amd64.tar") == [qualified(UPSTREAM_IMAGES["nvidia"])]
    assert [p.name for p in bundle_images.archives(str(bundle), "arm64")] == ["train-arm64.tar", "volcano.tar"]
    nameless = docker_archive(tmp_path / "x.tar", ["bad name\nwith a newline", "-flag"])
    zipped = tmp_path / "y.tar"
    zipped.write_bytes(b"\x1f\x8b\x08compressed")
    for path, why in ((nameless, "names no image"), (zipped, "not a plain image tar")):
        with pytest.raises(StepFailed, match=why) as caught:
            bundle_images.archive_refs(path)
        assert "\n" not in str(caught.value)


def test_each_node_imports_the_tars_for_its_cpu_and_preflight_leaves_them_out(geotrain_home, tmp_path):
    bundle = _bundle(tmp_path)
    nodes = [_node("x86", "198.51.100.10", gpus=["nvidia"]), _node("gh200", "198.51.100.11", arch="aarch64",
                                                                   gpus=["nvidia"])]
    result = _dry_run(nodes, only=["k3s"], bundle=str(bundle))
    for node, arch, mine, not_mine in (("x86", "amd64", "train-amd64.tar", "train-arm64.tar"),
                                       ("gh200", "arm64", "train-arm64.tar", "train-amd64.tar")):
        commands = [r.command for r in result.command_log.for_node(node)]
        imports = [c for c in commands if " images import --platform" in c and "/images/" in c]
        assert [c.split(" --platform ")[1].split()[0] for c in imports] == [f"linux/{arch}"] * 2
        assert any(mine in c for c in imports) and not any(not_mine in c for c in commands)
    plan = ClusterPlan("up", [NodeSpec("x86", "198.51.100.10", "server")])
    plan.k3s.bundle = str(bundle)
    said = {n.name: offline.needs_line(plan, n.facts) for n in nodes}  # what preflight says per node
    assert "vc-scheduler" not in said["x86"] and "pytorch/pytorch" not in said["x86"]
    assert "nvcr.io/nvidia/pytorch" not in said["gh200"] and "vc-controller-manager" in said["gh200"]


@pytest.fixture
def containerd_socket(tmp_path):
    """A real containerd of its own (root only: it mounts snapshots)."""
    if shutil.which("containerd") is None or subprocess.run(["id", "-u"], capture_output=True, text=True).stdout.strip() != "0":
        pytest.skip("needs root and containerd")
    home = tmp_path / "containerd"
    home.mkdir()
    socket = home / "c.sock"
    config = home / "config.toml"
    config.write_text(f'version = 2\nroot = "{home}/root"\nstate = "{home}/state"\n'
                      f'[grpc]\n  address = "{socket}"\n')
    daemon = subprocess.Popen(["containerd", "--config", str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if subprocess.run(["ctr", "--address", str(socket), "version"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        yield socket
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_a_real_containerd_imports_the_streamed_tar_once(containerd_socket, tmp_path, monkeypatch):
    bundle = _bundle(tmp_path, docker=False)
    monkeypatch.setattr(bundle_images, "CTR", f"ctr --address {containerd_socket} -n k8s.io")
    monkeypatch.setattr(bundle_images, "REMOTE_DIR", str(tmp_path / "node-images"))
    spec = NodeSpec("n", "198.51.100.10", "server")
    plan = ClusterPlan("up", [spec])
    plan.k3s.bundle = str(bundle)
    log = CommandLog()
    target = NodeTarget(spec, NodeSession("n", LocalShell(), tmp_path / "n.log", log, [], sudo=False),
                        facts={"system": {"arch": "x86_64"}, "init": {"systemd": False}})
    target.gathered = True
    ctx = DeployContext(plan, {"n": target}, log, secrets={})
    training = qualified(UPSTREAM_IMAGES["nvidia"])
    said = bundle_images.import_phase(ctx, target)
    assert VOLCANO in said and training in said and NGC_PYTORCH not in said  # the arm64 tar stays
    listed = subprocess.run(["ctr", "--address", str(containerd_socket), "-n", "k8s.io", "images", "ls", "-q"],
                            capture_output=True, text=True).stdout.split()
    assert {VOLCANO, training} <= set(listed)
    assert not list((tmp_path / "node-images").iterdir())  # the streamed tar is removed after the import
    assert bundle_images.import_phase(ctx, target) == "bundle images present"
