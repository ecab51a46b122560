"""The default image and what geotrain delivers beside it (core.domain.images,
core.kubernetes.recipes_delivery): the upstream image per vendor, the recipes source as
ConfigMaps (created and deleted through the real client against the stand-in API server),
the per-node dependency install run for real (a local wheel stands in for PyPI, which
cannot be reached here) and the per-node dataset cache."""

from __future__ import annotations

import base64
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from core.backends.kubernetes import KubernetesBackend
from core.domain.images import UPSTREAM_IMAGES, image_for, images_for_nodes, qualified, vendor_of_facts
from core.domain.records import Cluster
from core.errors import FieldError, InvalidInput
from core.kubernetes import recipes_delivery as delivery
from core.kubernetes.admission import admission_errors
from core.kubernetes.manifests import manifests_yaml, render_manifests
from core.kubernetes.names import rocm_variant
from core.kubernetes.node_groups import NodeGroup
from core.kubernetes.pod_security import pod_specs, violations
from tests.kubernetes.conftest import HETEROGENEOUS, make_spec, write_kubeconfig

WIZARD = Cluster(name="dc", kind="geotrain")


def _render(cluster=WIZARD, groups=HETEROGENEOUS, **spec):
    out = render_manifests("ws-d", make_spec(workers=spec.pop("workers", 7), **spec), cluster, groups, "team", {})
    return out, out[-1]


def _trainer(pod):
    return pod["containers"][0]


def _env(pod):
    return {e["name"]: e.get("value") for e in _trainer(pod)["env"]}


# --- the image ------------------------------------------------------------------------------
def test_each_vendor_runs_its_upstream_image_and_a_custom_image_is_used_as_given():
    assert images_for_nodes(["cpu", "amd", "nvidia", "amd"]) == {
        v: image_for(v) for v in ("nvidia", "amd", "cpu")}
    assert image_for("amd").image.startswith("rocm/pytorch:") and image_for("amd").delivered
    assert image_for("cpu").image == image_for("nvidia").image == UPSTREAM_IMAGES["nvidia"]
    own = images_for_nodes(["nvidia", "amd"], "registry.example.com/team/recipes:2.0")
    assert own["nvidia"].image == "registry.example.com/team/recipes:2.0" and not own["nvidia"].delivered
    for ref in ("registry.example.com:5000/team/r:2.0", "team/r", "r@sha256:" + "a" * 64):
        assert image_for("amd", ref).image == rocm_variant(ref)  # one rule for AMD builds
    assert qualified(UPSTREAM_IMAGES["nvidia"]) == "docker.io/" + UPSTREAM_IMAGES["nvidia"]
    assert qualified("ubuntu:24.04") == "docker.io/library/ubuntu:24.04"
    assert qualified("registry.example.com/team/r:1") == "registry.example.com/team/r:1"
    assert vendor_of_facts({"gpus": [{"name": "AMD Instinct MI300X"}]}) == "amd"
    assert vendor_of_facts({"gpus": [{"name": "NVIDIA H100"}, {"name": "AMD Instinct"}]}) == "nvidia"
    assert vendor_of_facts({}) == "cpu"


def test_the_pods_run_the_upstream_image_with_the_recipes_on_their_python_path(job_validator):
    out, job = _render()
    assert not list(job_validator.iter_errors(job)) and admission_errors(job) == []
    pods = dict(pod_specs(job))
    assert _trainer(pods["worker-amd"])["image"] == UPSTREAM_IMAGES["amd"]
    assert _trainer(pods["worker-cpu"])["image"] == UPSTREAM_IMAGES["cpu"]
    for pod in pods.values():
        env = _env(pod)
        (install,) = [c for c in pod["initContainers"] if c["name"] == "install-deps"]
        install_env = {e["name"]: e["value"] for e in install["env"]}
        assert env["PYTHONPATH"].split(":") == [delivery.SOURCE_DIR, install_env["GEOTRAIN_DEPS_DIR"]]
        assert install_env["GEOTRAIN_DEPS_DIR"].startswith(delivery.DEPS_MOUNT + "/")
        assert env["HOME"] == "/workspace" and env["USER"] == "geotrain"  # uid 1000 has no passwd entry
        mounts = {m["name"]: m for m in _trainer(pod)["volumeMounts"]}
        assert mounts["recipes-src"] == {"name": "recipes-src", "mountPath": delivery.SOURCE_DIR, "readOnly": True}
        # the node-wide dependency cache is on every later workspace's PYTHONPATH: a root step
        # without capabilities installs it, the trainer (uid 1000) can only read it
        assert mounts["pydeps"] == {"name": "pydeps", "mountPath": delivery.DEPS_MOUNT, "readOnly": True}
        assert install["securityContext"]["runAsUser"] == 0
        assert install["securityContext"]["capabilities"] == {"drop": ["ALL"]}
        assert "GEOTRAIN_DEPS" in install["command"][2]
        assert "GEOTRAIN_DEPS" not in _trainer(pod)["command"][2]
        owner = next(c for c in pod["initContainers"] if c["name"] == "cache-owner")
        assert delivery.DEPS_MOUNT not in owner["command"][2]
    # one cache directory per image: the ROCm image's Python differs from the CUDA one's
    deps = {name: _env(pods[name])["PYTHONPATH"].split(":")[1] for name in ("worker-amd", "worker-cpu")}
    assert deps["worker-amd"] != deps["worker-cpu"]


def test_a_custom_image_gets_no_configmaps_and_no_install():
    out, job = _render(image="registry.example.com/team/recipes:2.0")
    assert [m["kind"] for m in out] == ["ConfigMap", "NetworkPolicy", "Secret", "Service", "NetworkPolicy", "ConfigMap",
                                        "ServiceAccount", "Role", "RoleBinding", "Deployment", "Job"]
    # the config only (the fence; the elastic store's token, Service and fence; the watcher)
    for _, pod in pod_specs(job):
        assert "PYTHONPATH" not in _env(pod) and "GEOTRAIN_DEPS" not in _trainer(pod)["command"][2]
        assert "recipes-src" not in {v["name"] for v in pod["volumes"]}
    amd = dict(pod_specs(job))["worker-amd"]
    assert _trainer(amd)["image"] == "registry.example.com/team/recipes:2.0-rocm"


# --- the recipes source ---------------------------------------------------------------------
def _project(maps, volume, into: Path) -> None:
    """What kubelet does with the projected volume: each item's key written at its path."""
    by_name = {m["metadata"]["name"]: m["data"] for m in maps}
    for source in volume["projected"]["sources"]:
        data = by_name[source["configMap"]["name"]]
        for item in source["configMap"]["items"]:
            target = into / item["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(data[item["key"]])


def test_the_configmaps_rebuild_the_installed_recipes_package(tmp_path):
    out, job = _render()
    maps = [m for m in out if m["metadata"]["name"].startswith("gt-ws-d-recipes-")]
    assert maps and all(m["metadata"]["labels"][delivery.PART_LABEL] == "recipes" for m in maps)
    assert all(len(yaml.safe_dump(m).encode()) < 1 << 20 for m in maps)  # under the API's 1 MiB
    volume = next(v for v in dict(pod_specs(job))["master"]["volumes"] if v["name"] == "recipes-src")
    _project(maps, volume, tmp_path)
    root = delivery.recipes_root()
    expected = sorted(p.relative_to(root.parent).as_posix() for p in root.rglob("*")
                      if p.suffix in delivery.SOURCE_SUFFIXES and "__pycache__" not in p.parts and p.is_file())
    got = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert got == expected and "recipes/train.py" in got
    assert (tmp_path / "recipes/train.py").read_bytes() == (root / "train.py").read_bytes()
    shown = manifests_yaml(out)  # --dry-run: a count, not 200 KB of source
    assert f"<recipes source>: {len(expected)} files" in shown and "def main(" not in shown
    # the projected tree is importable as the pods import it (a torch-free module)
    check = subprocess.run([sys.executable, "-c", "import recipes.schema, sys; print(recipes.schema.__file__)"],
                           cwd="/", env={**os.environ, "PYTHONPATH": str(tmp_path)}, capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout.startswith(str(tmp_path)), check.stderr


def test_only_plain_source_files_go_and_large_packages_split(tmp_path):
    package = tmp_path / "recipes"
    (package / "sub").mkdir(parents=True)
    for i in range(4):
        (package / f"big{i}.py").write_text("x = 1  # " + "y" * (250 << 10) + "\n")
    (package / "sub" / "conf.yaml").write_text("a: 1\n")
    (package / "notes.txt").write_text("not source\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "big0.cpython-311.pyc").write_bytes(b"\0")
    (package / "stolen.py").symlink_to("/etc/hostname")
    (package / "linked").symlink_to(tmp_path, target_is_directory=True)
    files = delivery.recipes_files(package)
    assert [f.path for f in files] == ["recipes/big0.py", "recipes/big1.py", "recipes/big2.py",
                                       "recipes/big3.py", "recipes/sub/conf.yaml"]
    maps = delivery.render_source_maps("gt-x", {"labels": {"a": "b"}, "namespace": "n"}, files)
    assert [m["metadata"]["name"] for m in maps] == ["gt-x-recipes-0", "gt-x-recipes-1"]
    assert all(sum(len(v) for v in m["data"].values()) <= delivery.CONFIG_MAP_BYTES for m in maps)
    _project(maps, delivery.source_volume(maps, files), tmp_path / "pod")
    assert (tmp_path / "pod/recipes/sub/conf.yaml").read_text() == "a: 1\n"
    (package / "huge.py").write_text("z" * (delivery.MAX_FILE_BYTES + 1))
    with pytest.raises(InvalidInput, match="huge.py .* over the 256 KiB"):
        delivery.recipes_files(package)


def test_the_configmaps_are_created_and_deleted_with_the_workspace(fake, tmp_path, geotrain_home):
    cluster = Cluster(name="dc", kind="kubernetes", kubeconfig_path=write_kubeconfig(tmp_path / "kc", fake.url),
                      config={"context": "fake-ctx", "node_caches": True,
                              "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]})
    backend = KubernetesBackend(cluster)
    backend.deploy("ws-src", make_spec(cluster="dc", workers=2), {})
    names = sorted(n for (res, _, n) in fake.objects if res == "configmaps")
    assert names == ["gt-ws-src-config", "gt-ws-src-history", "gt-ws-src-recipes-0"]  # history: the watcher's
    stored = fake.objects[("configmaps", "default", "gt-ws-src-recipes-0")]
    assert any(v.startswith('"""') or "import" in v for v in stored["data"].values())
    fake.objects[("configmaps", "default", "other-app")] = {"metadata": {"name": "other-app", "labels": {}}}
    backend.delete("ws-src")
    assert sorted(n for (res, _, n) in fake.objects if res == "configmaps") == ["other-app"]


# --- the dependency install, run for real ---------------------------------------------------
def _wheel(directory: Path, module: str = "geotrain_tinydep", body: str = "VALUE = 42\n",
           requires: str = "") -> Path:
    """A tiny pure-Python wheel (what PyPI would serve), built by hand: no network, no build."""
    info = f"{module}-0.1.dist-info"
    files = {f"{module}/__init__.py": body,
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n"
                                 + (f"Requires-Dist: {requires}\n" if requires else ""),
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(t.encode()).digest()).rstrip(b'=').decode()},"
                     f"{len(t.encode())}\n" for p, t in files.items())
    path = directory / f"{module}-0.1-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for name, text in files.items():
            whl.writestr(name, text)
        whl.writestr(f"{info}/RECORD", record + f"{info}/RECORD,,\n")
    return path


def _lock(directory: Path, *wheels: Path) -> Path:
    """A lock file as pip-compile --generate-hashes writes it, for the given wheels."""
    lock = directory / "requirements.lock"
    lock.write_text("".join(f"{w.name.split('-')[0]}=={w.name.split('-')[1]} \\\n    --hash=sha256:"
                            f"{hashlib.sha256(w.read_bytes()).hexdigest()}\n" for w in wheels))
    return lock


def _install(deps: Path, lock: Path | str) -> subprocess.Popen:
    """The install step as the pod runs it: the lock with hashes, the wheels from a local index."""
    script = (f"py={sys.executable}\n" + delivery.INSTALL_DEPS +
              'exec "$py" -c "import geotrain_tinydep as t, importlib.util as u; '
              'print(\'torch from\', u.find_spec(\'torch\').origin); print(\'value\', t.VALUE)"')
    env = {"PATH": os.environ["PATH"], "GEOTRAIN_DEPS_DIR": str(deps), "GEOTRAIN_REQUIREMENTS": str(lock),
           "PYTHONPATH": str(deps), "PIP_NO_INDEX": "1", "HOME": str(deps.parent),
           "PIP_FIND_LINKS": str(Path(lock).parent / "wheels"), "PIP_CONFIG_FILE": os.devnull}
    return subprocess.Popen(["/bin/sh", "-c", script], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_two_pods_on_a_node_install_the_dependencies_once_and_both_use_them(tmp_path):
    """Also: pip --target installs dependencies of dependencies, torch too if one asks for it;
    the image's own torch (its CUDA or ROCm build) must stay the one imported."""
    deps = tmp_path / "pydeps" / delivery.deps_key(UPSTREAM_IMAGES["cpu"])
    (tmp_path / "wheels").mkdir()
    torch = _wheel(tmp_path / "wheels", "torch", "raise ImportError('the stand-in torch from PyPI was imported')\n")
    wheel = _wheel(tmp_path / "wheels", requires="torch")
    pods = [_install(deps, _lock(tmp_path, wheel, torch)) for _ in range(2)]
    outputs = [p.communicate(timeout=120)[0] for p in pods]
    assert [p.returncode for p in pods] == [0, 0], outputs
    assert all("value 42" in out for out in outputs)
    for out in outputs:
        (line,) = [x for x in out.splitlines() if x.startswith("torch from")]
        assert str(deps) not in line and line.endswith("torch/__init__.py")  # the image's (here: this venv's)
    assert (deps / "geotrain_tinydep").is_dir() and not list(deps.glob("torch*"))
    assert sum("installing the recipes' Python dependencies" in out for out in outputs) == 1
    assert (deps / ".complete").is_file() and not (deps.parent / (deps.name + ".part")).exists()
    later = _install(deps, tmp_path / "no-such.lock")  # the cache is used: pip is not asked
    assert later.communicate(timeout=60)[0].strip().endswith("value 42") and later.returncode == 0


def test_a_failed_install_says_what_to_do_and_leaves_no_half_cache(tmp_path):
    deps = tmp_path / "pydeps" / "k"
    (tmp_path / "wheels").mkdir()
    (tmp_path / "requirements.lock").write_text("missing==0.1 --hash=sha256:" + "ab" * 32 + "\n")
    pod = _install(deps, tmp_path / "requirements.lock")
    out = pod.communicate(timeout=120)[0]
    assert pod.returncode == 1 and "the node needs PyPI" in out and "--image" in out
    assert not deps.exists()


def test_a_package_that_is_not_the_locked_one_is_refused_and_nothing_is_cached(tmp_path):
    """Issue 38.13: the index (PyPI, a mirror, or whoever answers for it) serves another file
    under the locked name and version: pip refuses it, the node cache stays empty."""
    deps = tmp_path / "pydeps" / "k"
    (tmp_path / "wheels").mkdir()
    lock = _lock(tmp_path, _wheel(tmp_path / "wheels"))
    _wheel(tmp_path / "wheels", body="import os; os.system('touch /tmp/planted')\n")  # replaced
    pod = _install(deps, lock)
    out = pod.communicate(timeout=120)[0]
    assert pod.returncode == 1 and "DO NOT MATCH THE HASHES" in out
    assert f"geotrain: pip could not install the locked {lock} (a file whose sha256 differs is refused)" in out
    assert not deps.exists() and not (deps.parent / "k.part" / "geotrain_tinydep").exists()


def test_the_pods_install_the_shipped_lock_with_hashes():
    root = delivery.recipes_root().parent
    lock = (root / delivery.LOCK_FILE).read_text()
    pins = dict(line.split(" ", 1)[0].split("==") for line in lock.splitlines() if "==" in line)
    wanted = [line.strip() for line in (root / "recipes" / "requirements.in").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert tuple(wanted) == delivery.REQUIREMENTS  # the lock's source is the list the pods need
    for requirement in delivery.REQUIREMENTS:
        name = requirement.split(">=")[0].replace("_", "-")
        assert name in pins, name
    blocks = lock.split("==")[1:]
    assert len(blocks) == len(pins) and all("--hash=sha256:" in b for b in blocks)  # every pin hashed
    assert "torch==" not in lock  # the image's own torch stays the one used
    options = [line for line in lock.splitlines() if line.startswith("-")]
    assert options == []  # no --find-links or --index-url of the machine that made it
    assert delivery.LOCK_FILE in {f.path for f in delivery.recipes_files()}  # delivered with the source
    _, job = _render()
    for _, pod in pod_specs(job):
        (install,) = [c for c in pod["initContainers"] if c["name"] == "install-deps"]
        env = {e["name"]: e["value"] for e in install["env"]}
        assert env["GEOTRAIN_REQUIREMENTS"] == f"{delivery.SOURCE_DIR}/{delivery.LOCK_FILE}"
        # a failed install's tail reaches initContainerStatuses (Kubernetes docs, "Determine the
        # Reason for Pod Failure": FallbackToLogsOnError; read by pod_phases.init_phase)
        assert install["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert {"name": "recipes-src", "mountPath": delivery.SOURCE_DIR, "readOnly": True} in install["volumeMounts"]
        assert '"--require-hashes", "-r", pins' in install["command"][2]


# --- the per-node dataset cache -------------------------------------------------------------
def test_the_dataset_cache_is_a_node_directory_the_recipes_write_to():
    out, job = _render(workers=2, groups=[NodeGroup("cpu", 0, ("a", "b"))],
                       config={"model": "gpt-neo", "size": "tiny", "data": {"source": "c4"}})
    config = yaml.safe_load(out[0]["data"]["config.yaml"])
    assert config["data"]["cache_dir"] == f"{delivery.DATASET_MOUNT}/c4"  # keyed by dataset
    for _, pod in pod_specs(job):
        volume = next(v for v in pod["volumes"] if v["name"] == "datasets")
        assert volume["hostPath"] == {"path": delivery.DEFAULT_DATASET_CACHE, "type": "DirectoryOrCreate"}
        assert _env(pod)["HF_HOME"] == delivery.POD_HF_HOME
        owner = next(i for i in pod["initContainers"] if i["name"] == "cache-owner")
        assert owner["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}
    mine = {"model": "gpt-neo", "size": "tiny", "data": {"source": "c4", "cache_dir": "/scratch/mine"}}
    out, _ = _render(workers=2, groups=[NodeGroup("cpu", 0, ("a", "b"))], config=mine)
    assert yaml.safe_load(out[0]["data"]["config.yaml"])["data"]["cache_dir"] == "/scratch/mine"


def test_nothing_a_workspace_pulls_for_itself_sits_in_the_shared_cache():
    """Issue 38.3: with HF_HOME on the node's shared cache, a checkpoint pulled from recovery.hf_repo
    landed where every workspace on the node could replace it, and huggingface_hub returns cached
    files unchecked (a workspace resumed with planted weights). HF_HOME is the pod's own now; only
    public data is prepared in the shared cache."""
    groups = [NodeGroup("cpu", 0, ("a", "b"))]
    _, job = _render(workers=2, groups=groups, recovery={"hf_repo": "team/ckpts"}, tokens={"hf": "r"})
    for _, pod in pod_specs(job):
        home = _env(pod)["HF_HOME"]
        assert not home.startswith(delivery.DATASET_MOUNT)
        work = next(m for m in _trainer(pod)["volumeMounts"] if home.startswith(m["mountPath"] + "/"))
        assert "emptyDir" in next(v for v in pod["volumes"] if v["name"] == work["name"])  # the pod's own
        assert not [e for e in _trainer(pod)["env"] if str(e.get("value")).startswith(delivery.DATASET_MOUNT + "/")]
    for own in ({"path": "/data/mine"}, {"hub_name": "team/private-corpus"}, {"eval_path": "/data/held"}):
        config = {"model": "gpt-neo", "size": "tiny", "data": {"source": "c4", **own}}
        out, _ = _render(workers=2, groups=groups, config=config)
        assert yaml.safe_load(out[0]["data"]["config.yaml"])["data"].get("cache_dir", "cache") == "cache", own


@pytest.mark.parametrize("value, found", [("/etc/geotrain", "a directory of its own"), ("/var/lib", "a directory of its own"),
                                          ("/srv/a/../b", "normalised"), ("data", "absolute path"),
                                          ("/srv/x\n", "plain path"), (3, "absolute path")])
def test_a_bad_dataset_cache_is_refused_by_name(value, found):
    cluster = Cluster(name="dc", kind="geotrain", config={"dataset_cache": value})
    with pytest.raises(FieldError, match="dataset_cache") as caught:
        _render(cluster=cluster)
    assert found in str(caught.value)


def test_where_node_directories_are_refused_pods_go_without_the_node_caches():
    for config, kind in (({"pod_security_enforce": "baseline"}, "geotrain"), ({}, "kubernetes"),
                         ({"dataset_cache": False, "node_caches": False}, "geotrain")):
        out, job = _render(cluster=Cluster(name="dc", kind=kind, config=config),
                           workers=1, groups=HETEROGENEOUS[:1])
        pod = dict(pod_specs(job))["master"]
        assert not any("hostPath" in v for v in pod["volumes"]), config
        assert next(v for v in pod["volumes"] if v["name"] == "pydeps") == {"name": "pydeps", "emptyDir": {}}
        assert violations(pod, "restricted") == []
        assert "cache_dir" not in (yaml.safe_load(out[0]["data"]["config.yaml"]).get("data") or {})
    opted = Cluster(name="dc", kind="kubernetes", config={"node_caches": True, "dataset_cache": "/srv/ds"})
    _, job = _render(cluster=opted, workers=1, groups=HETEROGENEOUS[:1])
    assert {"name": "datasets", "hostPath": {"path": "/srv/ds", "type": "DirectoryOrCreate"}} in \
        dict(pod_specs(job))["master"]["volumes"]


def test_a_pip_mirror_reaches_the_pods_and_a_bad_one_is_refused():
    cluster = Cluster(name="dc", kind="geotrain", config={"pip_index_url": "https://pypi.example.org/simple"})
    _, job = _render(cluster=cluster)
    for _, pod in pod_specs(job):
        (install,) = [c for c in pod["initContainers"] if c["name"] == "install-deps"]
        assert {"name": "PIP_INDEX_URL", "value": "https://pypi.example.org/simple"} in install["env"]
    with pytest.raises(FieldError, match="pip_index_url"):
        _render(cluster=Cluster(name="dc", kind="geotrain", config={"pip_index_url": "https://x/$(reboot)'"}))


def test_a_file_swapped_after_the_listing_is_refused_not_read_through(tmp_path, monkeypatch):
    """bounded_files lists with lstat; the read itself opens without following a link and stops at
    the bound, so a file replaced between the two steps (a link to a secret, a FIFO, a grown file)
    is one line, not shipped."""
    from core.domain import source_files

    package = tmp_path / "recipes"
    package.mkdir()
    (package / "train.py").write_text("x = 1\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for the cluster\n")
    listed = source_files.bounded_files

    def swap(kind):
        def listing(*args, **kwargs):
            found = listed(*args, **kwargs)
            (package / "train.py").unlink()
            if kind == "link":
                (package / "train.py").symlink_to(secret)
            elif kind == "fifo":
                os.mkfifo(package / "train.py")
            else:
                (package / "train.py").write_text("y" * (delivery.MAX_FILE_BYTES + 1))
            return found
        return listing

    for kind in ("link", "fifo", "grown"):
        monkeypatch.setattr(delivery, "bounded_files", swap(kind))
        with pytest.raises(InvalidInput, match="train.py changed while geotrain read it") as caught:
            delivery.recipes_files(package)
        assert "not for the cluster" not in str(caught.value) and "\n" not in str(caught.value)
        (package / "train.py").unlink()
        (package / "train.py").write_text("x = 1\n")
    monkeypatch.setattr(delivery, "bounded_files", listed)
    assert [f.text for f in delivery.recipes_files(package)] == ["x = 1\n"]
