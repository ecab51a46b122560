"""One Volcano task per datacenter (per GPU kind inside it), each pod told where it sits.

When the nodes carry a datacenter (the wizard's `topology.kubernetes.io/zone` label, or the
node records), the job's workers are grouped by datacenter: a task's pods are held to their
datacenter by node affinity on the zone label, and each pod gets the environment recipes
read (core.domain.datacenters): the datacenter's name, its index and the count, the workers
in it and this pod's rank inside it. A datacenter with two GPU kinds (nvidia.com/gpu and
amd.com/gpu) gets one task per kind; its pods still share the datacenter's identity and
count their ranks across both tasks. Torch elastic's global rank is untouched.

Ranks and sizes count processes (torchrun starts one per GPU, each a worker to recipes/):
the pod's shell sets GEOTRAIN_DC_RANK to the rank of its first process, from the pod's index
in its task (Volcano's env plugin sets `VC_TASK_INDEX` per pod; volcano.sh docs, "Env
Plugin"), and a pod of several processes starts each through a small `sh` that adds the
process's LOCAL_RANK (torchrun `--no-python`), so every process sees its own rank.

GEOTRAIN_DC_COUNT is what turns the recipe's hierarchical DiLoCo on, and that needs the same
number of worker processes in every datacenter (recipes/topology.py refuses the run
otherwise): where the datacenters differ, it is left out and the job trains flat, its pods
still told their datacenter, rank and size there.

A config that says `datacenters: K` (--datacenters K) is what the placement follows: K > 1
places workers/K workers in each of K datacenters (or refuses in one line), and an explicit
1 trains flat wherever the workers land. Without it, the placement decides as above.
"""

from __future__ import annotations

from typing import Any, Callable

from core.domain.datacenters import (DATACENTER_ENV, DC_COUNT_ENV, DC_INDEX_ENV, DC_RANK_ENV,
                                     DC_SIZE_ENV, ZONE_LABEL)
from core.errors import InvalidInput
from core.kubernetes.elastic_manifests import ELASTIC_MARK
from core.kubernetes.node_groups import NodeGroup, allocate

Placed = list[tuple[NodeGroup, int]]
Template = Callable[[NodeGroup, bool], dict[str, Any]]

# The pod's rank in its datacenter, from its index in the task (Volcano's env plugin).
_RANK_PRELUDE = """\
[ -n "${{VC_TASK_INDEX:-}}" ] || {{ echo "geotrain: VC_TASK_INDEX is unset: the job needs Volcano's env plugin" >&2; exit 1; }}
export {rank}=$(({offset} + VC_TASK_INDEX * {slots}))
"""


TRAIN_MODULE = "-m recipes.train"  # where torchrun's command names the training script
CUSTOM_PROGRAM = " --no-python "  # or where it names a custom-training command (core.kubernetes.custom_command)
# torchrun --no-python runs `/bin/sh -c SCRIPT PYTHON -m recipes.train ...`: SCRIPT adds
# the process's LOCAL_RANK to the pod's first rank, then becomes python (the pod's shell
# found it as $py before the rendezvous wait).
PER_PROCESS_RANK = ("--no-python /bin/sh -c "
                    f"'{DC_RANK_ENV}=$(({DC_RANK_ENV} + LOCAL_RANK)) exec \"$0\" \"$@\"' \"${{py:-python3}}\" ")


def _rank_per_process(script: str) -> str:
    if ELASTIC_MARK in script:  # elastic pods start their processes themselves, each with its own rank
        return script
    if CUSTOM_PROGRAM in script:  # a custom-training command: the same shell, then the user's program
        return script.replace(CUSTOM_PROGRAM, " " + PER_PROCESS_RANK.split('"${py')[0], 1)
    if script.count(TRAIN_MODULE) != 1:
        raise AssertionError(f"the pod command has no single {TRAIN_MODULE!r} to add ranks at")
    return script.replace(TRAIN_MODULE, PER_PROCESS_RANK + TRAIN_MODULE)


def uses_datacenters(placed: Placed) -> bool:
    """Datacenter tasks when any placed node has a datacenter; refuses a job mixing nodes
    with and without one (their pods could not be told where they are)."""
    named = [g for g, _ in placed if g.datacenter]
    if named and len(named) < len(placed):
        bare = next(g for g, _ in placed if not g.datacenter)
        raise InvalidInput(
            f"node {bare.hostnames[0]} has no datacenter, but other nodes of the job do",
            f"give every node a datacenter (Kubernetes label {ZONE_LABEL}, or the node's "
            "datacenter in the pool), or none")
    return bool(named)


def asked_datacenters(config: dict[str, Any]) -> int | None:
    """The config's `datacenters` when it was set (core.workspaces keeps it only then)."""
    asked = config.get("datacenters")
    return asked if isinstance(asked, int) and not isinstance(asked, bool) else None


def place(groups: list[NodeGroup], workers: int, cluster_name: str, asked: int | None) -> Placed:
    """Where the workers go: `allocate`'s order, or, when K > 1 datacenters are asked for on
    nodes that have datacenters, workers/K nodes in each of the first K datacenters (in the
    groups' order: GPU groups first) that can hold them, with as many processes in each."""
    if not asked or asked == 1 or not any(g.datacenter for g in groups):
        return allocate(groups, workers, cluster_name)
    if workers % asked:
        raise InvalidInput(f"{workers} workers do not split evenly into {asked} datacenters",
                           f"use --workers a multiple of {asked}, or another --datacenters")
    per, by_dc = workers // asked, {}
    for group in groups:
        if group.datacenter:
            by_dc.setdefault(group.datacenter, []).append(group)
    nodes = {dc: sum(len(g.hostnames) for g in here) for dc, here in by_dc.items()}
    fit = [dc for dc in by_dc if nodes[dc] >= per][:asked]
    if len(fit) < asked:
        have = ", ".join(f"{dc}: {n}" for dc, n in nodes.items())
        raise InvalidInput(f"--datacenters {asked} with {workers} workers needs {asked} datacenters of {per} "
                           f"node{'s' if per != 1 else ''} each; cluster {cluster_name!r} has {len(fit)} ({have})",
                           "use fewer --workers or --datacenters, or label more nodes with their datacenter")
    order = {id(g): i for i, g in enumerate(groups)}
    placed = sorted((item for dc in fit for item in allocate(by_dc[dc], per, cluster_name)),
                    key=lambda item: order[id(item[0])])
    sizes = {dc: sum(g.slots * n for g, n in placed if g.datacenter == dc) for dc in fit}
    if len(set(sizes.values())) > 1:
        said = ", ".join(f"{dc}: {n}" for dc, n in sizes.items())
        raise InvalidInput(f"--datacenters {asked} would run unequal worker processes per datacenter ({said}); "
                           "hierarchical DiLoCo needs the same number in each",
                           "choose --workers so each datacenter gets nodes with the same GPU count, or --datacenters 1")
    return placed


def datacenters(placed: Placed) -> list[str]:
    """The job's datacenters in index order (sorted by name)."""
    return sorted({str(g.datacenter) for g, _ in placed})


def _task_name(index: int, group: NodeGroup, siblings: list[NodeGroup]) -> str:
    """`dc<i>`, or `dc<i>-<vendor>[n]` in a datacenter with several kinds of node: short and
    DNS-1035 whatever the datacenter is called (its name travels in the environment)."""
    if len(siblings) == 1:
        return f"dc{index}"
    same = [g for g in siblings if g.vendor == group.vendor]
    suffix = str(same.index(group) + 1) if len(same) > 1 and same.index(group) else ""
    return f"dc{index}-{group.vendor}{suffix}"


def _tell_pod(template: dict[str, Any], dc: str, index: int, count: int | None, size: int,
              rank: int | None, offset: int, slots: int) -> dict[str, Any]:
    """Add the datacenter's environment and zone affinity to a pod template (in place)."""
    container = template["spec"]["containers"][0]
    shell = container["command"]
    if slots > 1:
        shell[-1] = _rank_per_process(shell[-1])
    env = {DATACENTER_ENV: dc, DC_INDEX_ENV: str(index), DC_SIZE_ENV: str(size)}
    if count is not None:
        env[DC_COUNT_ENV] = str(count)
    if rank is not None:  # the master: one pod, its rank known now
        env[DC_RANK_ENV] = str(rank)
    else:
        shell[-1] = _RANK_PRELUDE.format(rank=DC_RANK_ENV, offset=offset, slots=slots) + shell[-1]
    container["env"] = container["env"] + [{"name": k, "value": v} for k, v in env.items()]
    affinity = template["spec"].setdefault("affinity", {})
    terms = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {}).setdefault(
        "nodeSelectorTerms", [{"matchExpressions": []}])
    for term in terms:  # terms are ORed: every one must hold the zone
        term.setdefault("matchExpressions", []).append(
            {"key": ZONE_LABEL, "operator": "In", "values": [dc]})
    return template


def datacenter_tasks(placed: Placed, template: Template, asked: int | None = None) -> list[dict[str, Any]]:
    """The master task (rank 0 of the first placed node's datacenter) and one worker task per
    datacenter and node kind, replicas = that kind's workers there. `asked`: the config's
    datacenters (an explicit 1 trains flat; K > 1 was placed by `place`)."""
    names = datacenters(placed)
    host_group = placed[0][0]
    sizes = {dc: sum(g.slots * n for g, n in placed if g.datacenter == dc) for dc in names}
    equal = len(set(sizes.values())) == 1 and asked != 1
    dc_count = len(names) if equal else None  # None: unequal or flat asked for, train flat
    tasks: list[dict[str, Any]] = []
    for index, dc in enumerate(names):
        here = [(g, n) for g, n in placed if g.datacenter == dc]
        size = sizes[dc]
        offset = 0
        if host_group.datacenter == dc:
            master = _tell_pod(template(host_group, True), dc, index, dc_count, size, 0, 0,
                               host_group.slots)
            tasks.append({"name": "master", "replicas": 1, "minAvailable": 1, "template": master,
                          "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}]})
            offset = host_group.slots
        for group, count in here:
            count -= 1 if group is host_group else 0
            if not count:
                continue
            pod = _tell_pod(template(group, False), dc, index, dc_count, size, None, offset,
                            group.slots)
            name = _task_name(index, group, [g for g, _ in here])
            tasks.append({"name": name, "replicas": count, "minAvailable": count, "template": pod})
            offset += count * group.slots
    return sorted(tasks, key=lambda task: task["name"] != "master")  # the master first, as ever
