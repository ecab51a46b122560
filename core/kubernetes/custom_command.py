"""A custom-training workspace's pods: torchrun runs the user's command (argv, `--no-python`)
instead of `-m recipes.train`, with everything else of a catalog workspace's pod (topology,
rendezvous, checkpoint volume, tokens, W&B, Pod Security).

The command's --workdir is delivered as the recipes are (core.kubernetes.recipes_delivery):
its source files in ConfigMaps (`<job>-workdir-<n>`, labelled as recipes source so they go
with the workspace), projected read-only at WORKDIR_MOUNT, the command's working directory.
Without --workdir the command runs where --image's WORKDIR says. On the default image the
recipes' own delivery also ships geotrain_loop as a top-level package beside `recipes`.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from core.domain.custom_training import CUSTOM_TRAINING, command_env, workdir_files
from core.domain.records import WorkspaceSpec
from core.domain.source_files import read_shipped
from core.domain.terminal_text import printable
from core.errors import InvalidInput
from core.kubernetes import recipes_delivery as delivery

WORKDIR_MOUNT = "/opt/geotrain/workdir"
LOOP_PACKAGE = "recipes/geotrain_loop/"  # shipped again as geotrain_loop/ (its import name)


def is_custom(spec: WorkspaceSpec) -> bool:
    return spec.template == CUSTOM_TRAINING


def torchrun_program(spec: WorkspaceSpec, config_file: str) -> str:
    """What torchrun starts on each local rank, as shell words: the recipe, or the user's argv
    (`python`/`python3` become the image's interpreter, found by the pod script as "$py")."""
    if not is_custom(spec):
        return shlex.join(["-m", "recipes.train", "--config", config_file])
    head, rest = spec.command[0], spec.command[1:]
    program = '"$py"' if head in ("python", "python3") else shlex.quote(head)
    return " ".join(["--no-python", program, *map(shlex.quote, rest)])


def with_loop_package(files: list[delivery.SourceFile]) -> list[delivery.SourceFile]:
    """The recipes files plus geotrain_loop's again at geotrain_loop/ (importable as `geotrain_loop`)."""
    return files + [delivery.SourceFile(f.path[len("recipes/"):], f.text) for f in files
                    if f.path.startswith(LOOP_PACKAGE)]


def workdir_sources(spec: WorkspaceSpec) -> list[delivery.SourceFile]:
    """The --workdir's files as text (UTF-8 only: a ConfigMap's data is text)."""
    if not (is_custom(spec) and spec.workdir):
        return []
    found = []
    for rel, full in workdir_files(Path(spec.workdir)):
        try:
            found.append(delivery.SourceFile(rel, read_shipped(full, "leave the workdir alone while deploying")))
        except UnicodeDecodeError:
            raise InvalidInput(f"{printable(str(full))} is not UTF-8 text",
                               "fix or remove the file, or bake the workdir into --image") from None
    return found


def workdir_maps(job: str, metadata: dict[str, Any], spec: WorkspaceSpec) -> tuple[list[dict], dict | None]:
    """The workdir's ConfigMaps and the volume that rebuilds its tree ([], None without a workdir)."""
    files = workdir_sources(spec)
    if not files:
        return [], None
    maps = delivery.render_source_maps(job, metadata, files, part="workdir")
    return maps, delivery.source_volume(maps, files, name="workdir")


def add_command(pod: dict[str, Any], container: dict[str, Any], spec: WorkspaceSpec,
                workdir: dict[str, Any] | None, out_dir: str) -> None:
    """The command's environment (GEOTRAIN_OUT_DIR, preset, steps, W&B project) and its directory."""
    if not is_custom(spec):
        return
    project = (spec.config.get("logging") or {}).get("wandb_project")
    env = {**command_env(out_dir, spec.preset, spec.steps), **({"WANDB_PROJECT": project} if project else {}),
           "PYTHONDONTWRITEBYTECODE": "1"}  # the workdir is read-only
    container["env"] += [{"name": k, "value": str(v)} for k, v in env.items()]
    if workdir is not None:
        pod["volumes"].append(workdir)
        container["volumeMounts"].append({"name": "workdir", "mountPath": WORKDIR_MOUNT, "readOnly": True})
        container["workingDir"] = WORKDIR_MOUNT
    elif spec.image:
        container.pop("workingDir", None)  # the image's own WORKDIR, where its code was baked in
