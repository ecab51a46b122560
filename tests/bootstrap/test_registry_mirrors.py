"""An optional registry mirror for the nodes' containerd (issue 41, item 4): the CRI plugin's
registry config_path names /etc/containerd/certs.d, each mirrored registry gets its hosts.toml
(the mirror for pull and resolve, then the registry: containerd docs/hosts.md, whose docker.io
example serves Docker Hub from registry-1.docker.io), the images step's ctr is pointed at the same
directory (--hosts-dir: ctr reads no CRI config), and the choice is kept with the cluster."""

from __future__ import annotations

import tomllib

import pytest

from core.bootstrap import containerd
from core.bootstrap.deploy import _config_to_plan, build_plan, plan_config
from core.bootstrap.registry_mirrors import CERTS_DIR, hosts_toml, parse_mirrors
from core.cli import main
from core.domain.records import Node
from core.errors import InvalidInput
from core.state.node_records import add_nodes
from core.state.store import Store

MIRROR = "https://mirror.example.com:5000/dockerhub"


def test_hosts_toml_and_the_config_path_in_both_config_versions():
    hosts = tomllib.loads(hosts_toml("docker.io", MIRROR))
    assert hosts == {"server": "https://registry-1.docker.io", "host": {MIRROR: {"capabilities": ["pull", "resolve"]}}}
    assert tomllib.loads(hosts_toml("nvcr.io", MIRROR))["server"] == "https://nvcr.io"
    v3 = tomllib.loads(containerd.render_config(True, False, 3, mirrors=True))
    assert v3["plugins"]["io.containerd.cri.v1.images"]["registry"] == {"config_path": CERTS_DIR}
    v2 = tomllib.loads(containerd.render_config(True, False, 2, mirrors=True))
    assert v2["plugins"]["io.containerd.grpc.v1.cri"]["registry"] == {"config_path": CERTS_DIR}
    assert "registry" not in tomllib.loads(containerd.render_config(True, False, 3))["plugins"]["io.containerd.cri.v1.images"]


@pytest.mark.parametrize("item, said", [
    ("docker.io", "is not an http(s) URL"), ("docker.io=ftp://x", "is not an http(s) URL"),
    ('docker.io=https://x"]\n[evil', "is not an http(s) URL"), ("Docker.IO=https://x", "not a registry host name"),
    ("=https://x", "not a registry host name")])
def test_a_bad_mirror_is_one_line_naming_it(item, said):
    with pytest.raises(InvalidInput) as caught:
        parse_mirrors([item])
    assert said in caught.value.message and "\n" not in caught.value.message


def test_the_deploy_writes_them_and_keeps_them_with_the_cluster(geotrain_home, capsys):
    add_nodes(Store(), [Node(name="n0", host="198.51.100.1", username="ubuntu")])
    assert main(["clusters", "deploy", "c1", "--nodes", "n0", "--dry-run", "--only", "containerd,images",
                 "--pull-images", "--registry-mirror", f"docker.io={MIRROR}"]) == 0
    out = capsys.readouterr().out
    assert f"put: put {CERTS_DIR}/docker.io/hosts.toml mode 644" in out
    assert f"images pull --hosts-dir {CERTS_DIR} docker.io/pytorch/pytorch" in out
    plan = build_plan(Store(), "c1", ["n0"])
    plan.registry_mirrors = parse_mirrors([f"docker.io={MIRROR}"])
    assert plan_config(plan)["registry_mirrors"] == {"docker.io": MIRROR}
    again = _config_to_plan("c1", plan_config(plan), plan.nodes)  # what a later deploy starts from
    assert again.registry_mirrors == {"docker.io": MIRROR}
    with pytest.raises(InvalidInput):  # a stored value is checked again, as given
        _config_to_plan("c1", {**plan_config(plan), "registry_mirrors": {"docker.io": "x; reboot"}}, plan.nodes)
    assert main(["clusters", "deploy", "c1", "--nodes", "n0", "--dry-run", "--registry-mirror", "docker.io"]) == 2
    assert "is not an http(s) URL" in capsys.readouterr().err
