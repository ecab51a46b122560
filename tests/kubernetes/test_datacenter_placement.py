"""`--datacenters K` and where the workers land agree (issue 41, item 10): on nodes that span
more zones than K, a job of W workers is placed W/K per datacenter in K of them, tells each pod
GEOTRAIN_DC_COUNT=K, or is refused in one line; an explicit `datacenters: 1` trains flat.
recipes/topology.py is the rule the pods apply: GEOTRAIN_DC_COUNT x GEOTRAIN_DC_SIZE must be the
world size, every datacenter the same size."""

from __future__ import annotations

import pytest
import yaml

from core.domain.datacenters import ZONE_LABEL
from core.domain.records import Cluster
from core.errors import InvalidInput
from core.kubernetes.manifests import render_volcano_job
from core.kubernetes.node_groups import NodeGroup
from recipes.topology import resolve
from tests.kubernetes.conftest import make_spec, run

CLUSTER = Cluster(name="dc", kind="geotrain")
# The cluster: one-GPU nodes in three zones, ams the largest
THREE_ZONES = [NodeGroup("nvidia", 1, ("ams-a", "ams-b", "ams-c", "ams-d"), "ams"),
               NodeGroup("nvidia", 1, ("fra-a", "fra-b"), "fra"),
               NodeGroup("nvidia", 1, ("waw-a", "waw-b"), "waw")]


def _envs(job) -> list[dict[str, str]]:
    return [{e["name"]: e.get("value") for e in t["template"]["spec"]["containers"][0]["env"]} | {"replicas": t["replicas"]}
            for t in job["spec"]["tasks"]]


def test_two_datacenters_asked_on_three_zones_place_two_equal_ones():
    job = render_volcano_job("ws-k2", make_spec(workers=4, config={"datacenters": 2}), CLUSTER, THREE_ZONES)
    envs = _envs(job)
    workers = {}
    for env in envs:
        workers[env["GEOTRAIN_DATACENTER"]] = workers.get(env["GEOTRAIN_DATACENTER"], 0) + env["replicas"]
    assert workers == {"ams": 2, "fra": 2}  # not ams 4, fra 1, waw 1
    assert {(e["GEOTRAIN_DC_COUNT"], e["GEOTRAIN_DC_SIZE"]) for e in envs} == {("2", "2")}
    # what every pod's recipes/topology.py makes of it: a valid 2 x 2 layout
    for env in envs:
        topo = resolve(0, 4, 2, {k: v for k, v in env.items() if k.startswith("GEOTRAIN_D")} | {"GEOTRAIN_DC_RANK": "0"})
        assert (topo.count, topo.size) == (2, 2)


def test_datacenters_the_nodes_cannot_hold_are_refused_in_one_line():
    with pytest.raises(InvalidInput) as caught:  # 3 x 3 needs three zones of three nodes
        render_volcano_job("ws", make_spec(workers=9, config={"datacenters": 3}), CLUSTER, THREE_ZONES)
    assert caught.value.message == ("--datacenters 3 with 9 workers needs 3 datacenters of 3 nodes each; "
                                    "cluster 'dc' has 1 (ams: 4, fra: 2, waw: 2)")
    unequal = [NodeGroup("nvidia", 8, ("fra-a",), "fra"), NodeGroup("nvidia", 1, ("lon-a",), "lon")]
    with pytest.raises(InvalidInput) as caught:  # one node each, but 8 processes against 1
        render_volcano_job("ws", make_spec(workers=2, config={"datacenters": 2}), CLUSTER, unequal)
    assert "unequal worker processes per datacenter (fra: 8, lon: 1)" in caught.value.message
    assert "\n" not in caught.value.message


def test_an_explicit_single_datacenter_trains_flat_across_zones():
    job = render_volcano_job("ws", make_spec(workers=4, config={"datacenters": 1}), CLUSTER, THREE_ZONES)
    assert not any("GEOTRAIN_DC_COUNT" in env for env in _envs(job))  # placement as ever, no hierarchy
    unset = render_volcano_job("ws", make_spec(workers=4), CLUSTER, [THREE_ZONES[1], THREE_ZONES[2]])
    assert {e["GEOTRAIN_DC_COUNT"] for e in _envs(unset)} == {"2"}  # not asked: the placement decides


def test_cli_dry_run_with_datacenters_on_a_three_zone_cluster(fake, kubeconfig, capsys):
    """The real CLI against FakeKubeAPI (a stand-in for the API server, which cannot run here)."""
    fake.nodes = [{"metadata": {"name": host, "labels": {ZONE_LABEL: group.datacenter}},
                   "status": {"allocatable": {"nvidia.com/gpu": "1"}}} for group in THREE_ZONES for host in group.hostnames]
    code, _, err = run(capsys, "clusters", "add-kubernetes", "zones", "--kubeconfig", kubeconfig)
    assert code == 0, err
    deploy = ("workspaces", "deploy", "distributed-training", "--cluster", "zones", "--model", "gpt-neo",
              "--size", "tiny", "--dry-run")
    code, out, err = run(capsys, *deploy, "--workers", "4", "--datacenters", "2")
    assert code == 0, err
    job = next(d for d in yaml.safe_load_all(out) if d and d.get("kind") == "Job")
    assert sorted({e["GEOTRAIN_DATACENTER"] for e in _envs(job)}) == ["ams", "fra"]
    assert {(e["GEOTRAIN_DC_COUNT"], e["GEOTRAIN_DC_SIZE"]) for e in _envs(job)} == {("2", "2")}
    code, out, err = run(capsys, *deploy, "--workers", "6", "--datacenters", "2")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "--datacenters 2 with 6 workers needs 2 datacenters of 3 nodes each; cluster 'zones' has 1" in err
