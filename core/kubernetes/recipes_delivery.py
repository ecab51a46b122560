"""What a workspace's pods need beside the image: the recipes source, their Python
dependencies and the per-node dataset cache (core.domain.images picks the image).

On the default (upstream PyTorch) image:
- the recipes source comes from the installed `recipes` package as ConfigMaps
  (`<job>-recipes-<n>`, each under Kubernetes' 1 MiB cap; only .py/.yaml files, no
  symlinks, size-limited), projected read-only at SOURCE_DIR, on PYTHONPATH; created and
  deleted with the workspace;
- the dependencies the recipes import beyond torch are installed at pod start from the
  recipes' lock file (recipes/requirements.lock: every package pinned, every file's sha256,
  `pip install --require-hashes`, so neither PyPI nor a mirror can hand a pod other code)
  with `pip install --target` into a per-node cache (`/var/lib/geotrain/pydeps/<key>`,
  hostPath), once per node and image under a file lock, so later pods and workspaces reuse
  them. The nodes need PyPI (or the cluster's `pip_index_url`, a mirror) the first time;
  where the namespace's Pod Security forbids node directories, an emptyDir per pod instead.
A team's own image gets none of this: it carries recipes and dependencies itself.

Every pod, on any image, gets the per-node dataset cache (cluster `dataset_cache`, default
/var/lib/geotrain/datasets, checked like recovery.host_path) at DATASET_MOUNT: the recipes'
tokenised data of public datasets (`data.cache_dir`, keyed by data source) lives there, so a
later workspace on the node reuses what an earlier one prepared. The cache is shared on
purpose, so the workspaces of one cluster trust each other's prepared public data;
`dataset_cache: false` turns it off. Nothing else goes there: data from the user's own files
or Hub datasets stays in the pod, and so does HF_HOME (POD_HF_HOME): huggingface_hub returns
a cached file without checking it, so a shared HF cache would let any workspace on the node
plant the weights another one pulls (issue 38.3); checkpoints, like everything a workspace
pulls from the Hub, stay its own.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.domain.limits import DELIVERY_FILE_BYTES, DELIVERY_TOTAL_BYTES
from core.domain.recovery import check_host_path
from core.domain.source_files import bounded_files, read_shipped
from core.errors import FieldError, InvalidInput
from core.kubernetes.pod_security import POD_SECURITY_KEY

SOURCE_DIR = "/opt/geotrain/src"  # recipes/ lands at SOURCE_DIR/recipes
DEPS_MOUNT = "/opt/geotrain/pydeps"
DEPS_HOST_PATH = "/var/lib/geotrain/pydeps"
DATASET_MOUNT = "/datasets"
DEFAULT_DATASET_CACHE = "/var/lib/geotrain/datasets"
POD_HF_HOME = "/workspace/.cache/huggingface"  # in the pod's own emptyDir (manifests.WORK_DIR)
PUBLIC_HUB_DATASETS = (None, "allenai/c4")  # data.hub_name values whose text may be cached for all
PART_LABEL = "geotrain.io/part"
SOURCE_SUFFIXES = (".py", ".yaml", ".lock")
LOCK_FILE = "recipes/requirements.lock"  # pip-compile --generate-hashes of recipes/requirements.in
MAX_FILE_BYTES = DELIVERY_FILE_BYTES  # the bounds a custom-training --workdir shares (core.domain.limits)
MAX_TOTAL_BYTES = DELIVERY_TOTAL_BYTES
CONFIG_MAP_BYTES = 900 << 10  # under the API server's 1 MiB per object, with room for metadata
KEY_RE = re.compile(r"[^-._a-zA-Z0-9]")
# What the recipes import beyond torch and the standard library (recipes/Dockerfile installs
# the same): transformers for the language models, datasets/huggingface_hub for real data,
# wandb, pyyaml/pydantic for the config, torch-geometric (GNN), pillow/soundfile/pandas (loaders).
REQUIREMENTS = ("transformers>=4.50", "datasets>=3", "huggingface_hub>=0.26", "wandb>=0.18",
                "pyyaml>=6", "pydantic>=2.7", "torch-geometric>=2.5", "pillow>=10",
                "soundfile>=0.12", "pandas>=2")
POD_UID = 1000

# Installs the dependencies once per node: the first pod takes the lock and installs into a
# fresh directory, renamed into place when complete; the others wait on the lock, then find
# it done. Runs as the pod's user; stdout says what happens (the log view shows it).
FIND_PYTHON = 'py=$(command -v python3 || command -v python) || { echo "geotrain: the image has no python" >&2; exit 1; }\n'

INSTALL_DEPS = """\
"$py" - <<'GEOTRAIN_DEPS' || exit 1
import fcntl, os, shutil, subprocess, sys
deps, pins = os.environ["GEOTRAIN_DEPS_DIR"], os.environ["GEOTRAIN_REQUIREMENTS"]
if not os.path.isfile(os.path.join(deps, ".complete")):
    os.makedirs(os.path.dirname(deps), exist_ok=True)
    with open(deps + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isfile(os.path.join(deps, ".complete")):
            print("geotrain: installing the recipes' Python dependencies into the node cache " + deps, flush=True)
            part = deps + ".part"
            shutil.rmtree(part, ignore_errors=True)
            cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-cache-dir",
                   "--disable-pip-version-check", "--target", part, "--require-hashes", "-r", pins]
            if subprocess.call(cmd) != 0:
                print("geotrain: pip could not install the locked " + pins + " (a file whose sha256 differs is refused): the node needs PyPI "
                      "(or set the cluster's pip_index_url to a mirror), or deploy with --image "
                      "and an image that has them", file=sys.stderr, flush=True)
                sys.exit(1)
            for name in os.listdir(part):  # the image's own torch and GPU libraries stay the ones used
                if name.split("-")[0].split(".")[0].lower() in ("torch", "torchgen", "functorch", "triton") \
                        or name.startswith("nvidia"):
                    shutil.rmtree(os.path.join(part, name), ignore_errors=True)
            open(os.path.join(part, ".complete"), "w").close()
            shutil.rmtree(deps, ignore_errors=True)
            os.rename(part, deps)
GEOTRAIN_DEPS
"""

@dataclass(frozen=True)
class SourceFile:
    path: str  # relative to SOURCE_DIR, e.g. recipes/data/c4.py
    text: str


def recipes_root() -> Path:
    """The installed `recipes` package's directory (found, never imported: core runs no recipes code)."""
    spec = importlib.util.find_spec("recipes")
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        raise InvalidInput("the recipes package is not installed next to geotrain",
                           "reinstall geotrain (pip install geotrain), or deploy with --image")
    return Path(locations[0])


def recipes_files(root: Path | None = None) -> list[SourceFile]:
    """The package's .py and .yaml files, sorted; symlinks and caches skipped, sizes limited."""
    root = root or recipes_root()
    files = bounded_files(root, SOURCE_SUFFIXES, lambda full, size: InvalidInput(
        f"recipes file {full} is {size} bytes, over the {MAX_FILE_BYTES >> 10} KiB geotrain delivers per file",
        "keep large data out of the recipes package, or deploy with --image"), lambda: InvalidInput(
        f"the recipes package at {root} is over {MAX_TOTAL_BYTES >> 20} MiB",
        "remove what is not source from it, or deploy with --image"))
    found = []
    for full in files:
        try:
            text = read_shipped(full, "leave the recipes package alone while deploying")
        except UnicodeDecodeError:
            raise InvalidInput(f"recipes file {full} is not UTF-8 text",
                               "fix or remove the file, or deploy with --image") from None
        found.append(SourceFile(full.relative_to(root.parent).as_posix(), text))
    return found


def config_map_names(job: str, count: int, part: str = "recipes") -> list[str]:
    return [f"{job}-{part}-{i}" for i in range(count)]


def _chunks(files: list[SourceFile]) -> list[list[tuple[str, SourceFile]]]:
    """(key, file) groups of at most CONFIG_MAP_BYTES each; keys unique and valid."""
    groups: list[list[tuple[str, SourceFile]]] = [[]]
    size = 0
    for index, source in enumerate(files):
        key = f"f{index:03d}-" + KEY_RE.sub("_", source.path.rsplit("/", 1)[-1])
        length = len(source.text.encode()) + len(key)
        if groups[-1] and size + length > CONFIG_MAP_BYTES:
            groups.append([])
            size = 0
        groups[-1].append((key, source))
        size += length
    return groups


def render_source_maps(job: str, metadata: dict[str, Any], files: list[SourceFile],
                       part: str = "recipes") -> list[dict[str, Any]]:
    """The ConfigMaps holding the recipes source, or another source tree (`part`: a custom-training
    workdir), labelled alike so that they go with the workspace (metadata: the workspace's labels)."""
    maps = []
    for name, group in zip(config_map_names(job, len(_chunks(files)), part), _chunks(files)):
        labels = {**metadata["labels"], PART_LABEL: "recipes"}
        maps.append({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {**metadata, "name": name, "labels": labels},
                     "data": {key: source.text for key, source in group}})
    return maps


def source_volume(maps: list[dict[str, Any]], files: list[SourceFile], name: str = "recipes-src") -> dict[str, Any]:
    """One projected volume rebuilding the package tree from the ConfigMaps, read-only files."""
    paths = {f"f{i:03d}-" + KEY_RE.sub("_", f.path.rsplit("/", 1)[-1]): f.path for i, f in enumerate(files)}
    sources = [{"configMap": {"name": m["metadata"]["name"],
                              "items": [{"key": k, "path": paths[k]} for k in m["data"]]}} for m in maps]
    return {"name": name, "projected": {"defaultMode": 0o444, "sources": sources}}


def source_selector(workspace_label: str) -> str:
    """The label selector of a workspace's recipes ConfigMaps (deleted with the workspace)."""
    return f"geotrain.io/workspace={workspace_label},{PART_LABEL}=recipes"


def deps_key(image: str) -> str:
    """The node cache directory's name: one per image and requirement list (wheels differ by Python)."""
    lock = (recipes_root().parent / LOCK_FILE).read_text()
    return hashlib.sha256("\n".join((image, lock)).encode()).hexdigest()[:16]


def dataset_cache_dir(cluster_config: dict) -> str | None:
    """The node directory of the dataset cache; None when the cluster turned it off (false)."""
    value = cluster_config.get("dataset_cache", DEFAULT_DATASET_CACHE)
    if value is False:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise FieldError("dataset_cache", "an absolute path, or false", value,
                         "e.g. dataset_cache: /srv/geotrain-datasets")
    try:
        return check_host_path(value)
    except FieldError as exc:
        raise FieldError("dataset_cache", exc.expected, exc.found, exc.hint) from None


def node_dirs_allowed(cluster_config: dict, cluster_kind: str) -> bool:
    """Whether pods get the node caches (hostPath): never where the namespace enforces a Pod
    Security level that refuses them (baseline, restricted); else as the cluster's
    `node_caches` says; by default on clusters the wizard built (geotrain owns the nodes and
    k3s enforces nothing), off on registered ones (whose admission geotrain may not see)."""
    level = cluster_config.get(POD_SECURITY_KEY)
    if level and level != "privileged":
        return False
    if "node_caches" in cluster_config:
        return cluster_config["node_caches"] is True
    return cluster_kind == "geotrain"


def dataset_config(config: dict[str, Any], cluster_config: dict[str, Any],
                   cluster_kind: str) -> dict[str, Any]:
    """The recipe config with the tokenised-data cache on the node cache, keyed by data source
    (only when the pods get the cache, the user left `data.cache_dir` at its default and the
    data is public: no files of the user's own, a public Hub dataset)."""
    cache = dataset_cache_dir(cluster_config) if node_dirs_allowed(cluster_config, cluster_kind) else None
    data = dict(config.get("data") or {})
    public = not data.get("path") and not data.get("eval_path") and data.get("hub_name") in PUBLIC_HUB_DATASETS
    if cache and public and data.get("cache_dir", "cache") == "cache":
        data["cache_dir"] = f"{DATASET_MOUNT}/{data.get('source') or config.get('model') or 'default'}"
        config = {**config, "data": data}
    return config


def add_delivery(pod: dict[str, Any], container: dict[str, Any], image: str, delivered: bool,
                 cluster_config: dict[str, Any], cluster_kind: str,
                 source: dict[str, Any] | None) -> str:
    """Mount the source, dependency cache and dataset cache into one pod; returns the shell
    that must run before the recipe (the dependency install), "" when none."""
    node_dirs = node_dirs_allowed(cluster_config, cluster_kind)
    cache = dataset_cache_dir(cluster_config) if node_dirs else None
    env = container["env"]
    env.append({"name": "HF_HOME", "value": POD_HF_HOME})
    owned = []
    if cache:
        pod["volumes"].append({"name": "datasets", "hostPath": {"path": cache, "type": "DirectoryOrCreate"}})
        container["volumeMounts"].append({"name": "datasets", "mountPath": DATASET_MOUNT})
        env.append({"name": "GEOTRAIN_DATASET_CACHE", "value": DATASET_MOUNT})
        owned.append(DATASET_MOUNT)
    if not delivered:
        _owner(pod, image, owned)
        return ""
    if source is not None:
        pod["volumes"].append(source)
        container["volumeMounts"].append({"name": "recipes-src", "mountPath": SOURCE_DIR, "readOnly": True})
    deps = f"{DEPS_MOUNT}/{deps_key(image)}"
    pod["volumes"].append({"name": "pydeps", "hostPath": {"path": DEPS_HOST_PATH, "type": "DirectoryOrCreate"}}
                          if node_dirs else {"name": "pydeps", "emptyDir": {}})
    install_env = [{"name": "GEOTRAIN_DEPS_DIR", "value": deps},
                   {"name": "GEOTRAIN_REQUIREMENTS", "value": f"{SOURCE_DIR}/{LOCK_FILE}"}]
    index = cluster_config.get("pip_index_url")
    if index:
        install_env.append({"name": "PIP_INDEX_URL", "value": _index_url(index)})
    env += [{"name": "PYTHONPATH", "value": f"{SOURCE_DIR}:{deps}"},
            # uid 1000 has no passwd entry in the upstream images: getpass.getuser() (wandb,
            # torch's caches) reads these first, and pip needs a writable home
            {"name": "HOME", "value": "/workspace"}, {"name": "USER", "value": "geotrain"},
            {"name": "LOGNAME", "value": "geotrain"}]
    _owner(pod, image, owned)
    if not node_dirs:  # a per-pod emptyDir: the pod installs for itself, nobody else reads it
        env += install_env
        container["volumeMounts"].append({"name": "pydeps", "mountPath": DEPS_MOUNT})
        return INSTALL_DEPS
    # The node cache is shared by every later workspace on the node, and on their PYTHONPATH:
    # a root step (no capabilities) installs it, the trainer (uid 1000) only reads it, so code
    # running in one workspace cannot plant a module another imports.
    container["volumeMounts"].append({"name": "pydeps", "mountPath": DEPS_MOUNT, "readOnly": True})
    pod.setdefault("initContainers", []).append({
        "name": "install-deps", "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", FIND_PYTHON + INSTALL_DEPS],
        # a failed install's last lines reach initContainerStatuses (pod_phases.init_phase) even
        # where the API's log endpoint is not allowed: Kubernetes docs, "Determine the Reason for
        # Pod Failure", Customizing the termination message (the log's tail, 2048 bytes / 80 lines)
        "terminationMessagePolicy": "FallbackToLogsOnError",
        "env": [*install_env, {"name": "HOME", "value": "/tmp"}],
        "volumeMounts": [{"name": "pydeps", "mountPath": DEPS_MOUNT},
                         {"name": "recipes-src", "mountPath": SOURCE_DIR, "readOnly": True}],  # the lock
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "2Gi"}},
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                            "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}})
    return ""


def _index_url(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"https?://[^\s'\"\\]{1,400}", value):
        raise FieldError("pip_index_url", "an http(s) URL", value, "e.g. pip_index_url: https://pypi.example.org/simple")
    return value


def _owner(pod: dict[str, Any], image: str, owned: list[str]) -> None:
    """A root init step that hands the node directories kubelet made (root's, 0755) to the
    pod user, once (CHOWN only)."""
    if not owned:
        return
    names = {DATASET_MOUNT: "datasets", DEPS_MOUNT: "pydeps"}
    script = " && ".join(f'{{ [ "$(stat -c %u {d})" = {POD_UID} ] || chown {POD_UID}:{POD_UID} {d}; }}'
                         for d in owned)
    pod.setdefault("initContainers", []).append({
        "name": "cache-owner", "image": image, "imagePullPolicy": "IfNotPresent",
        "command": ["/bin/sh", "-c", script], "terminationMessagePolicy": "FallbackToLogsOnError",
        "volumeMounts": [{"name": names[d], "mountPath": d} for d in owned],
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "64Mi"}},
        "securityContext": {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False,
                            "allowPrivilegeEscalation": False,
                            "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}}})
