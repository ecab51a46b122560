"""check_before_deploy(): every requirement of a workspace, as one Report. The CLI and the
deploy form call it before submitting and refuse (unless forced) when something fails."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from core.domain.architectures import node_arch
from core.domain.custom_training import CUSTOM_TRAINING
from core.domain.images import custom_image, image_for
from core.domain.records import Cluster, WorkspaceSpec
from core.errors import InvalidInput
from core.requirements.cuda_driver import driver_findings
from core.kubernetes.datacenter_tasks import asked_datacenters
from core.requirements.hub_access import dataset_access
from core.requirements.machine import judge
from core.requirements.needs import dataset_of, needs_for
from core.requirements.placement import Machine, Refresh, machines
from core.requirements.report import OK, Finding, Report
from core.requirements.wandb_key import check_wandb_key
from core.state.cluster_records import get_cluster
from core.state.store import Store


def check_before_deploy(store: Store, spec: WorkspaceSpec, tokens: dict[str, str | None],
                        refresh: Refresh | None = None) -> Report:
    cluster = get_cluster(store, spec.cluster)
    used, findings = machines(store, cluster, spec.workers, refresh, asked_datacenters(spec.config))
    local_copy = _local_copy(spec.config) if cluster.kind == "local" else None
    for machine in used:
        findings += judge(machine.name, machine.facts, _needs(spec, machine, local_copy), machine.local)
        if not machine.local:
            findings += driver_findings(machine.name, machine.facts, _image(spec, cluster, machine))
    dataset = dataset_of(spec.config)
    if dataset and dataset.gated_repo:
        if local_copy:
            findings.append(Finding("local", "dataset access", f"a local copy at {local_copy}",
                                    f"read access to {dataset.gated_repo}", verdict=OK))
        else:
            findings.append(dataset_access(dataset.gated_repo, tokens.get("hf")))
    if tokens.get("wandb"):
        findings.append(check_wandb_key(tokens["wandb"] or ""))
    return Report(findings)


def _needs(spec: WorkspaceSpec, machine: Machine, local_copy: Path | None):
    custom = spec.template == CUSTOM_TRAINING  # its model's size is its own: the workers' base needs only
    needs = needs_for(spec.config, spec.model, spec.size, spec.steps, machine.processes,
                      machine.vendor, machine.local, params=0 if custom else None)
    return dataclasses.replace(needs, dataset_gb=0.0) if local_copy else needs


def _image(spec: WorkspaceSpec, cluster: Cluster, machine: Machine) -> str:
    """The image this machine's pods run ("" where none can: the deploy refuses that itself)."""
    try:
        return image_for(machine.vendor, custom_image(spec.image, cluster.config), node_arch(machine.facts)).image
    except InvalidInput:
        return ""


def _local_copy(config: dict) -> Path | None:
    """A dataset folder already on this machine (data.path) is not downloaded again."""
    path = (config.get("data") or {}).get("path")
    if not isinstance(path, str) or not path or dataset_of(config) is None:
        return None
    folder = Path(path).expanduser()
    return folder if folder.is_dir() and any(folder.iterdir()) else None
