"""Gathers the planner's inputs for a cluster (network matrix, parameter count, presets) and runs it.

`plan_for_cluster()` is what `geotrain clusters plan` and the app's deploy form
call. The matrix comes from the state store (measured by the cluster wizard; each pair's rate
replaced by the all-reduce its last `clusters check` measured, core.planner.measured_links),
from a YAML/JSON file (what-if questions before buying capacity), or, for the
built-in `local` cluster, from loopback figures.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any



from core.planner import wan_what_if as planner
from core.planner.measured_links import Figures, with_measured
from core.planner.streams import DEFAULT_WINDOW_BYTES, with_streams

from core.domain import recipe_catalog
from core.state.check_records import last_check
from core.state.cluster_records import get_cluster, network_matrix
from core.errors import InvalidInput, NotFound
from core.schema.user_files import read_user_file
from core.state.store import LOCAL_CLUSTER, Store
from core.schema.yaml_loader import load_yaml

# Loopback between local torchrun workers: measured ~300-900 MB/s for gloo here.
LOOPBACK_MBIT = 4000.0
LOOPBACK_LATENCY_MS = 0.05
DEFAULT_STEP_S = 1.0  # assumed compute seconds per step when none was measured
LINK_FIELDS = ("src", "dst", "latency_ms", "mbit_s")


def loopback_links(workers: int) -> list[planner.Link]:
    names = [f"local{i}" for i in range(workers)]
    return [planner.Link(a, b, LOOPBACK_LATENCY_MS, LOOPBACK_MBIT) for a in names for b in names if a != b]


def links_from_store(store: Store, cluster: str) -> list[planner.Link]:
    return [planner.Link(src, dst, latency or 0.0, mbit)
            for src, dst, latency, mbit in network_matrix(store, cluster)]


def _number(value: Any, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e12:
        raise InvalidInput(f"{where}: {name} must be a non-negative number below 1e12, not {str(value)[:40]}",
                           "fix the matrix file (see `geotrain clusters plan --help`)")
    return float(value)


def links_from_file(path: str | Path) -> list[planner.Link]:
    """A matrix file: `links: [{src, dst, latency_ms, mbit_s}, ...]` in YAML or JSON (or the bare list)."""
    path = Path(path)
    text = read_user_file(path, "matrix file", "check the path of the --matrix file")
    try:
        data = json.loads(text) if path.suffix == ".json" else load_yaml(text, path.name)
    except (ValueError, RecursionError, InvalidInput) as exc:
        said = exc.message if isinstance(exc, InvalidInput) else str(exc).splitlines()[0]
        raise InvalidInput(f"matrix file {path.name} is not valid {'JSON' if path.suffix == '.json' else 'YAML'}",
                           said) from None
    rows = data.get("links") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not rows:
        raise InvalidInput(f"matrix file {path.name} has no links",
                           "write `links:` followed by entries with src, dst, latency_ms, mbit_s")
    links = []
    for i, row in enumerate(rows):
        where = f"{path.name} link {i + 1}"
        if not isinstance(row, dict) or any(k not in row for k in LINK_FIELDS):
            raise InvalidInput(f"{where} needs the fields {', '.join(LINK_FIELDS)}", f"found {row!r}")
        links.append(planner.Link(str(row["src"]), str(row["dst"]),
                                  _number(row["latency_ms"], where, "latency_ms"),
                                  _number(row["mbit_s"], where, "mbit_s")))
    return links


def model_params(model: str, size: str) -> int:
    recipe_catalog.check_choice("model", model, list(recipe_catalog.models()), "--model")
    recipe_catalog.check_choice(f"size for {model}", size, recipe_catalog.models()[model], "--size")
    count = recipe_catalog.param_counts().get(model, {}).get(size)
    if count is None:
        raise NotFound(f"no parameter count for {model}/{size} in recipes/params.yaml",
                       "run `python -m recipes.bench.param_counts --write`, or pass --params N")
    return int(count)


def default_size(model: str) -> str:
    recipe_catalog.check_choice("model", model, list(recipe_catalog.models()), "--model")
    sizes = recipe_catalog.models()[model]
    return next((s for s in sizes if s != "tiny"), sizes[0])


def cluster_links(store: Store, cluster: str, workers: int | None) -> list[planner.Link]:
    return cluster_links_with_figures(store, cluster, workers)[0]


def cluster_links_with_figures(store: Store, cluster: str, workers: int | None
                               ) -> tuple[list[planner.Link], Figures]:
    """The cluster's links, at the rates its last `clusters check` measured where it did (else the
    probe's), and which figures those are."""
    record = get_cluster(store, cluster)
    if record.kind == "local" or cluster == LOCAL_CLUSTER:
        links = loopback_links(workers or 2)
        return links, Figures("loopback", 0, len(links))
    links = links_from_store(store, cluster)
    if not links:
        raise NotFound(f"cluster {cluster!r} has no measured network matrix",
                       "re-run the network step of the cluster wizard, or pass --matrix FILE")
    return with_measured(links, last_check(store, cluster))


def plan_for_cluster(store: Store | None, cluster: str | None, model: str, size: str | None = None, *,
                     step_time: float | None = None, matrix_file: str | Path | None = None,
                     params: int | None = None, workers: int | None = None,
                     target: float = planner.DEFAULT_TARGET,
                     efficiency: float = planner.DEFAULT_EFFICIENCY, streams: int = 1,
                     window_bytes: int = DEFAULT_WINDOW_BYTES) -> planner.Plan:
    """The deploy form's and the CLI's entry: a Plan for `model`/`size` on `cluster` (or on a matrix file),
    with `streams` parallel TCP streams per peer (core.planner.streams)."""
    if workers is not None and workers < 1:
        raise InvalidInput(f"workers must be at least 1, not {workers}", "pass --workers N")
    if matrix_file is not None:
        links = links_from_file(matrix_file)
        figures = Figures("file", 0, len(links))
    elif cluster is not None:
        links, figures = cluster_links_with_figures(store or Store(), cluster, workers)
    else:
        raise InvalidInput("nothing to plan for", "name a cluster or pass --matrix FILE")
    size = size or default_size(model)
    count = params if params is not None else model_params(model, size)
    links, assumed = with_streams(links, streams, window_bytes)
    net = planner.bottleneck(links, workers)
    result = planner.plan(recipe_catalog.presets(), count, step_time or DEFAULT_STEP_S, net, target, efficiency)
    result.streams = assumed
    result.figures = figures
    return result
