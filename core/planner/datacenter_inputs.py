"""The datacenter planner's inputs: datacenters, their GPUs, and the WAN between them.

From a cluster: its nodes' `datacenter` (a node without one is a datacenter of its own), the
GPUs their facts list (a CPU node counts as one worker) and the stored network matrix. From a
what-if matrix file: an optional `datacenters:` section beside `links:`, each entry either a
GPU count or `{gpus: N, nodes: [...]}` naming the matrix's nodes inside it; without it, every
name the links use is a datacenter with one GPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from core.domain import recipe_catalog
from core.domain.datacenters import check_datacenter
from core.errors import InvalidInput
from core.planner import cluster_inputs, dc_choice
from core.planner import wan_what_if as planner
from core.planner.streams import DEFAULT_WINDOW_BYTES, with_streams
from core.schema.user_files import read_user_file
from core.schema.yaml_loader import load_yaml
from core.state.node_records import list_nodes
from core.state.store import Store

DEFAULT_STEPS = 10_000  # the run's length on every datacenter, when none is given
MAX_SITE_GPUS = 1_000_000


def sites_of_cluster(store: Store, cluster: str) -> tuple[list[dc_choice.Site], dict[str, str]]:
    """The cluster's datacenters and which node sits in which."""
    gpus: dict[str, int] = {}
    site_of: dict[str, str] = {}
    for node in list_nodes(store):
        if node.cluster != cluster:
            continue
        site = check_datacenter(node.datacenter, f"node {node.name}") if node.datacenter else node.name
        site_of[node.name] = site
        gpus[site] = gpus.get(site, 0) + max(1, len(node.facts.get("gpus") or []))
    return [dc_choice.Site(name, count) for name, count in sorted(gpus.items())], site_of


def _gpu_count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_SITE_GPUS:
        raise InvalidInput(f"{where}: gpus must be a whole number from 1 to {MAX_SITE_GPUS}, not {str(value)[:40]}",
                           "fix the `datacenters:` section of the matrix file")
    return value


def sites_of_file(path: str | Path, links: list[planner.Link]) -> tuple[list[dc_choice.Site], dict[str, str]]:
    """The `datacenters:` section of a matrix file (or one datacenter per name in its links)."""
    path = Path(path)
    text = read_user_file(path, "matrix file", "check the path of the --matrix file")
    try:
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text, path.name)
    except (ValueError, RecursionError, InvalidInput):
        data = None  # links_from_file has already said what is wrong with it
    section = data.get("datacenters") if isinstance(data, dict) else None
    if section is None:
        names = sorted({link.src for link in links} | {link.dst for link in links})
        return [dc_choice.Site(n, 1) for n in names], {}
    if not isinstance(section, dict) or not section:
        raise InvalidInput(f"matrix file {path.name}: `datacenters:` must map names to GPU counts",
                           "e.g. datacenters: {fra: 8, lon: {gpus: 4, nodes: [lon-a, lon-b]}}")
    sites, site_of = [], {}
    for name, value in section.items():
        where = f"{path.name} datacenter {str(name)[:40]!r}"
        site = check_datacenter(str(name), where)
        nodes = value.get("nodes", []) if isinstance(value, dict) else []
        if not isinstance(nodes, list):
            raise InvalidInput(f"{where}: nodes must be a list of node names", "e.g. nodes: [lon-a, lon-b]")
        sites.append(dc_choice.Site(site, _gpu_count(value.get("gpus") if isinstance(value, dict) else value,
                                                     where)))
        site_of.update({str(n): site for n in nodes})
    known = {s.name for s in sites}
    strays = sorted({site_of.get(n, n) for link in links for n in (link.src, link.dst)} - known)
    if strays:
        raise InvalidInput(f"matrix file {path.name}: link endpoint {strays[0]!r} is in no datacenter",
                           "list it under `datacenters:` (as a datacenter, or in one's `nodes:`)")
    return sites, site_of


def choose_for_cluster(store: Store | None, cluster: str | None, model: str, size: str | None = None, *,
                       step_time: float | None = None, matrix_file: str | Path | None = None,
                       params: int | None = None, steps: int = DEFAULT_STEPS,
                       target: float = planner.DEFAULT_TARGET,
                       efficiency: float = planner.DEFAULT_EFFICIENCY, streams: int = 1,
                       window_bytes: int = DEFAULT_WINDOW_BYTES) -> dc_choice.DatacenterPlan | None:
    """The datacenters to use, or None where there is only one to choose (the local cluster)."""
    if matrix_file is not None:
        links = cluster_inputs.links_from_file(matrix_file)
        sites, site_of = sites_of_file(matrix_file, links)
    elif cluster is not None:
        store = store or Store()
        record = cluster_inputs.get_cluster(store, cluster)
        if record.kind == "local" or cluster == cluster_inputs.LOCAL_CLUSTER:
            return None
        sites, site_of = sites_of_cluster(store, cluster)
        if len(sites) < 2:
            return None
        links = cluster_inputs.cluster_links(store, cluster, None)
    else:
        raise InvalidInput("nothing to plan for", "name a cluster or pass --matrix FILE")
    if len(sites) < 2:
        return None
    size = size or cluster_inputs.default_size(model)
    count = params if params is not None else cluster_inputs.model_params(model, size)
    links = with_streams(links, streams, window_bytes)[0]
    return dc_choice.choose(sites, dc_choice.site_links(links, site_of), recipe_catalog.presets(), count,
                            step_time or cluster_inputs.DEFAULT_STEP_S, steps, target, efficiency)
