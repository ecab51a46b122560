"""The checkpoint volume is writable by the pod's user (uid 1000, the recipes image's USER),
proven by running the rendered pod's own commands as uid 1000 against a directory made
the way the cluster makes it, and writing and reading back a real checkpoint.

Stood in, because no kubelet runs here: the volume is a temp directory (its path replaces
the mount point in the env and the init script, as test_pod_command replaces the port),
the master's DNS name is localhost, the job is this one pod (--nnodes=1), and `recipes.train` is a stand-in that saves and loads
one checkpoint through the real recipes.checkpoint_store. The users and capabilities are
real: setpriv drops to uid/gid 1000 (+ the fsGroup) with no capabilities; the init step
runs as root with only the capabilities its securityContext adds.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from core.kubernetes.manifests import RDZV_PORT, render_volcano_job
from core.domain.records import Cluster
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.recovery_manifests import CHECKPOINT_MOUNT, POD_GID, POD_UID
from tests.kubernetes.conftest import make_spec

REPO = Path(__file__).resolve().parents[2]
STAND_IN_TRAIN = textwrap.dedent(f"""
    import importlib.util, os, torch
    spec = importlib.util.spec_from_file_location("store", {str(REPO / "recipes" / "checkpoint_store.py")!r})
    store_module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(store_module)
    store = store_module.CheckpointStore("out", rank=0)
    store.save(5, {{"step": 5, "model": {{"w": torch.arange(4.0)}}}})
    step = store.newest_complete()
    print(f"uid {{os.getuid()}} wrote and loaded step {{step}}: {{store.load(step)['model']['w'].tolist()}}", flush=True)
""")
# Inside a private mount namespace: /root is 0700 here, so the interpreter under it is made
# reachable for uid 1000 (same paths), then the pod's user runs the command.
AS_POD_USER = """set -e
if [ -n "$HIDDEN" ]; then
  mount --bind "$HIDDEN" "$STASH"; mount -t tmpfs -o mode=0755 tmpfs /root
  mkdir -p "$HIDDEN"; mount --bind "$STASH" "$HIDDEN"
fi
exec setpriv --reuid {uid} --regid {gid} --groups {gid} --inh-caps=-all --bounding-set=-all -- "$@"
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
                                reason="needs root, setpriv and unshare to switch users")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def base():
    """A temp tree uid 1000 can reach (pytest's tmp_path is under a 0700 directory)."""
    path = Path(tempfile.mkdtemp(prefix="gt-pod-user-"))
    path.chmod(0o755)
    (path / "work" / "recipes").mkdir(parents=True)
    (path / "work" / "recipes" / "__init__.py").write_text("")
    (path / "work" / "recipes" / "train.py").write_text(STAND_IN_TRAIN)
    for module in ("telemetry.py", "wandb_artifacts.py"):  # the store's imports of the image's recipes
        shutil.copy(REPO / "recipes" / module, path / "work" / "recipes")
    (path / "stash").mkdir()
    for sub in ("work", "work/recipes"):
        (path / sub).chmod(0o777)  # the image's working directory is the user's
    yield path
    shutil.rmtree(path)


def _pod(workers: int) -> dict:
    job = render_volcano_job("ws-own", make_spec(workers=workers, recovery={"elastic": False}), Cluster("dc", "geotrain"),
                             [NodeGroup("cpu", 0, ("a", "b", "c"))])
    return job["spec"]["tasks"][0]["template"]["spec"]


def _run(container: dict, volume: Path, base: Path, as_root_with: list[str] | None = None):
    env = {e["name"]: e["value"] for e in container.get("env", []) if "value" in e}
    env = {k: v.replace(CHECKPOINT_MOUNT, str(volume)) for k, v in env.items()}
    deps = base / "pydeps-prepared"  # the node's dependency cache, prepared by an earlier pod
    deps.mkdir(exist_ok=True)
    (deps / ".complete").touch()
    env.update(GEOTRAIN_DEPS_DIR=str(deps))
    env.update(POD_IP="127.0.0.1", GEOTRAIN_RDZV_HOST="localhost", HOME=str(base / "work"),
               PATH=f"{Path(sys.executable).parent}:/usr/bin:/bin", PYTHONPATH=str(base / "work"),
               OMP_NUM_THREADS="1")
    shell, flag, script = container["command"]
    script = script.replace(f":{RDZV_PORT}", f":{_free_port()}").replace(CHECKPOINT_MOUNT, str(volume))
    script = re.sub(r"--nnodes=\d+ ", "--nnodes=1 ", script)  # this pod alone: the others are not here
    script = script.replace("--max-restarts=3", "--max-restarts=0")  # a refused write fails at once
    if as_root_with is not None:  # the init step: root, only the capabilities it adds
        caps = ",".join(["-all"] + [f"+{c.lower()}" for c in as_root_with])
        argv = ["setpriv", f"--bounding-set={caps}", "--inh-caps=-all", "--", shell, flag, script]
    else:
        top = next((f"/root/{p.parts[2]}" for p in [Path(sys.base_prefix)] if p.parts[1:2] == ("root",)), "")
        env.update(HIDDEN=top, STASH=str(base / "stash"))
        argv = ["unshare", "--mount", "--propagation", "private", "/bin/sh", "-c",
                AS_POD_USER.format(uid=POD_UID, gid=POD_GID), "sh", shell, flag, script]
    return subprocess.run(argv, cwd=base / "work", env=env, text=True, capture_output=True, timeout=180)


@pytest.mark.slow
def test_a_local_path_claim_is_writable_by_the_pod_user(base):
    # local-path-provisioner's setup script: mkdir -m 0777 -p "$VOL_DIR"
    # (https://github.com/rancher/local-path-provisioner/blob/master/deploy/local-path-storage.yaml)
    pod = _pod(workers=1)
    assert "persistentVolumeClaim" in next(v for v in pod["volumes"] if v["name"] == "checkpoints")
    volume = base / "pvc-0123"
    volume.mkdir()
    volume.chmod(0o777)
    result = _run(pod["containers"][0], volume, base)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"uid {POD_UID} wrote and loaded step 5: [0.0, 1.0, 2.0, 3.0]" in result.stdout
    assert (volume / "step_00000005" / "rank_0.pt").stat().st_uid == POD_UID


@pytest.mark.slow
def test_a_node_directory_is_handed_to_the_pod_user_by_the_init_step(base):
    # hostPath DirectoryOrCreate: "created there as needed with permission set to 0755, having
    # the same group and ownership with Kubelet" (https://kubernetes.io/docs/concepts/storage/volumes/#hostpath)
    pod = _pod(workers=3)
    volume = base / "node" / "gt-ws-own"
    volume.mkdir(parents=True, mode=0o755)
    (base / "node").chmod(0o755)
    trainer = pod["containers"][0]
    (init,) = [c for c in pod["initContainers"] if c["name"] == "checkpoint-owner"]

    without = _run(trainer, volume, base)  # what issue 17 saw: no init step, no write
    assert without.returncode != 0 and "Permission denied" in without.stdout + without.stderr

    done = _run(init, volume, base, as_root_with=init["securityContext"]["capabilities"]["add"])
    assert done.returncode == 0, done.stderr
    assert (volume.stat().st_uid, oct(volume.stat().st_mode & 0o777)) == (POD_UID, "0o700")
    again = _run(init, volume, base, as_root_with=init["securityContext"]["capabilities"]["add"])
    assert again.returncode == 0, again.stderr  # a restarted pod runs it again: still fine

    result = _run(trainer, volume, base)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"uid {POD_UID} wrote and loaded step 5: [0.0, 1.0, 2.0, 3.0]" in result.stdout


def test_the_node_caches_are_handed_to_the_pod_user_by_their_init_step(base):
    """The dataset cache (core.kubernetes.recipes_delivery): a node directory kubelet makes
    root's 0755, chowned by a root step holding only CHOWN, once. The dependency cache stays
    root's: a root install step fills it, the trainer only reads it."""
    from core.kubernetes.recipes_delivery import DATASET_MOUNT, DEPS_MOUNT

    (init,) = [c for c in _pod(workers=3)["initContainers"] if c["name"] == "cache-owner"]
    assert init["securityContext"]["capabilities"]["add"] == ["CHOWN"]
    assert DEPS_MOUNT not in init["command"][2]
    dirs = {mount: base / "node" / mount.strip("/").replace("/", "-") for mount in (DATASET_MOUNT,)}
    for path in dirs.values():
        path.mkdir(parents=True, mode=0o755)
    script = init["command"][2]
    for mount, path in dirs.items():
        script = script.replace(mount, str(path))
    for _ in range(2):  # a restarted pod runs it again: still fine
        done = subprocess.run(["setpriv", "--bounding-set=-all,+chown", "--inh-caps=-all", "--", "/bin/sh", "-c", script],
                              capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        assert all(path.stat().st_uid == POD_UID for path in dirs.values())
