"""NVIDIA GPUs stay in running pods across `systemctl daemon-reload` (issue 41 item 5).

Upstream: NVIDIA's notice github.com/NVIDIA/nvidia-container-toolkit issue #48 (and #1227, the
same symptom in 2025): with systemd managing the pods' cgroups, a daemon-reload drops device
nodes that have no /dev/char/<major>:<minor> link, and the NVIDIA driver makes none. Its
workarounds for Kubernetes, in order: `nvidia-ctk system create-dev-char-symlinks --create-all`
at boot through a udev rule in /lib/udev/rules.d/71-nvidia-dev-char.rules, and the device
plugin's `--pass-device-specs` (env PASS_DEVICE_SPECS, NVIDIA/k8s-device-plugin
cmd/nvidia-device-plugin/main.go: "pass the list of DeviceSpecs to the kubelet on Allocate()").
"""

from __future__ import annotations

import shlex

import yaml

from core.bootstrap import containerd, nvidia_devices, volcano
from core.bootstrap.plan import NodeSpec, NodeTarget
from core.bootstrap.session import CommandLog, NodeSession
from tests.bootstrap.test_upstream_rules import _dry_run, _node

# The rule exactly as the notice gives it (its "Workarounds", the udev rule line).
UPSTREAM_RULE = ('ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", '
                 'RUN+="/usr/bin/nvidia-ctk system create-dev-char-symlinks --create-all"')


def test_nvidia_nodes_get_the_dev_char_links_now_and_at_every_driver_load(geotrain_home):
    nodes = [_node("gpu0", "198.51.100.10", gpus=["nvidia"]), _node("gpu1", "198.51.100.11", gpus=["amd"])]
    result = _dry_run(nodes, only=["containerd"])
    log = {n.name: result.command_log.for_node(n.name) for n in nodes}
    rule = [r for r in log["gpu0"] if r.kind == "put" and nvidia_devices.UDEV_RULE_PATH in r.command]
    assert len(rule) == 1 and UPSTREAM_RULE in rule[0].content.splitlines()
    assert rule[0].command.endswith("mode 644")
    links = [r.command for r in log["gpu0"] if "create-dev-char-symlinks" in r.command and r.kind != "put"]
    assert [shlex.split(c) for c in links] == [["/usr/bin/nvidia-ctk", "system", "create-dev-char-symlinks",
                                                "--create-all"]]
    assert not any("create-dev-char-symlinks" in r.command or "71-nvidia" in r.command for r in log["gpu1"])
    # the reason it matters: geotrain's own containerd uses the systemd cgroup driver there
    config = next(r.content for r in log["gpu0"] if r.kind == "put" and containerd.CONFIG_PATH in r.command)
    assert "SystemdCgroup = true" in config


def test_a_node_without_systemd_has_no_reload_to_survive():
    """No systemd as PID 1: containerd runs the cgroupfs driver (containerd.render_config)."""
    log = CommandLog()
    target = NodeTarget(NodeSpec("n", "198.51.100.10", "agent"), NodeSession("n", None, None, log, [], dry_run=True),
                        facts={"init": {"systemd": False}})
    assert nvidia_devices.keep_devices_across_reload(target) is None and log.records == []
    assert "SystemdCgroup = false" in containerd.render_config(False, True)


def test_the_device_plugin_passes_device_specs_to_the_kubelet(geotrain_home):
    result = _dry_run([_node("gpu0", "198.51.100.10", gpus=["nvidia"])], only=["volcano"])
    puts = {r.command.split()[1]: r.content for r in result.command_log.for_node("gpu0") if r.kind == "put"}
    plugin = yaml.safe_load(puts[f"{volcano.REMOTE_DIR}/nvidia-device-plugin-daemonset.yaml"])
    env = {e["name"]: e["value"] for e in plugin["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PASS_DEVICE_SPECS"] == "true"
