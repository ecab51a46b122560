"""The wizard labels each node with its datacenter as the Kubernetes zone."""

from __future__ import annotations

import shlex

import pytest
import yaml

from core.bootstrap.deploy import build_plan, deploy
from core.domain.datacenters import ZONE_LABEL, check_datacenter
from core.domain.records import Node
from core.errors import InvalidInput
from core.state.node_records import add_nodes
from core.state.store import Store


def _node(name, host, datacenter=None, gpus=()):
    return Node(name=name, host=host, username="root", datacenter=datacenter,
                facts={"system": {"arch": "x86_64"}, "gpus": [{"vendor": g, "name": g} for g in gpus]})


def _dry_run(nodes, only):
    store = Store()
    add_nodes(store, nodes)
    plan = build_plan(store, "zones", [n.name for n in nodes], subnet="10.77.0.0/24")
    return deploy(plan, only=only, dry_run=True, store=store)


def _config(result, node):
    puts = {r.command.split()[1]: r.content for r in result.command_log.for_node(node) if r.kind == "put"}
    return yaml.safe_load(puts["/etc/rancher/k3s/config.yaml"])


def test_each_node_registers_with_its_datacenter_as_zone(geotrain_home):
    nodes = [_node("a0", "198.51.100.10", "fra-1", gpus=["nvidia"]),
             _node("b0", "198.51.100.11", "lon.east"), _node("c0", "198.51.100.12")]
    result = _dry_run(nodes, ["k3s"])
    assert _config(result, "a0")["node-label"] == ["geotrain.io/gpu-vendor=nvidia",
                                                   f"{ZONE_LABEL}=fra-1"]
    assert _config(result, "b0")["node-label"] == [f"{ZONE_LABEL}=lon.east"]
    assert "node-label" not in _config(result, "c0")


def test_nodes_that_joined_earlier_get_the_zone_with_kubectl(geotrain_home):
    # k3s docs (https://docs.k3s.io/cli/agent, "--node-label"): labels are applied only when
    # the node registers, so the server labels every node with a datacenter once all are Ready.
    nodes = [_node("a0", "198.51.100.10", "fra"), _node("b0", "198.51.100.11", "lon"),
             _node("c0", "198.51.100.12")]
    result = _dry_run(nodes, ["k3s"])
    argvs = [shlex.split(r.command) for r in result.command_log.changes("a0")]
    labels = [a[4:] for a in argvs if a[4:5] == ["label"]]
    assert labels == [["label", "node", "a0", f"{ZONE_LABEL}=fra", "--overwrite", ">/dev/null"],
                      ["label", "node", "b0", f"{ZONE_LABEL}=lon", "--overwrite", ">/dev/null"]]


@pytest.mark.parametrize("bad", ["", "-fra", "fra-", "fra 1", "fra;reboot", "x" * 64, "fra/1", "frä"])
def test_a_datacenter_kubernetes_would_refuse_is_one_line_before_anything_runs(geotrain_home, bad):
    store = Store()
    add_nodes(store, [_node("a0", "198.51.100.10", bad or None), _node("b0", "198.51.100.11", "ok")])
    if not bad:  # an empty datacenter is no datacenter, not an error
        assert build_plan(store, "zones", ["a0", "b0"]).nodes[0].datacenter is None
        return
    with pytest.raises(InvalidInput) as caught:
        build_plan(store, "zones", ["a0", "b0"])
    assert "\n" not in caught.value.message and "node a0" in caught.value.message
    assert "label value" in caught.value.message and "63" in caught.value.hint


@pytest.mark.parametrize("good", ["a", "fra", "FRA-1", "eu_west.2", "x" * 63])
def test_label_values_kubernetes_accepts_pass(good):
    # k8s.io/apimachinery/pkg/util/validation IsValidLabelValue: ≤ 63, [A-Za-z0-9._-], alnum ends.
    assert check_datacenter(good, "here") == good


def test_importing_a_server_with_a_datacenter_kubernetes_would_refuse_contacts_nothing(geotrain_home):
    from core.nodes.pool import ImportRequest, NodePool

    pool = NodePool(Store())
    request = ImportRequest(name="gpu-1", host="192.0.2.1", username="root", datacenter="fra 1; reboot",
                            source="nodes.csv line 2")
    with pytest.raises(InvalidInput) as caught:
        pool.import_nodes([request])  # refused before any SSH connection (192.0.2.1 is TEST-NET)
    assert caught.value.message.startswith("nodes.csv line 2: node gpu-1: datacenter 'fra 1; reboot'")
    assert pool.list() == []
