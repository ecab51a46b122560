"""NVIDIA GPUs stay in their pods across `systemctl daemon-reload` (issue 41 item 5).

With the systemd cgroup driver (SystemdCgroup = true, which containerd.render_config sets
where systemd is PID 1), a daemon-reload makes systemd rewrite each pod's device allow-list
from the /dev/char/<major>:<minor> links; the NVIDIA driver makes none for its device nodes,
so running pods lose their GPUs ("Failed to initialize NVML: Unknown Error") until they are
recreated, and geotrain runs daemon-reload itself when it writes a unit on a re-deploy.
NVIDIA's notice (github.com/NVIDIA/nvidia-container-toolkit issue #48, again in #1227; the
toolkit docs' troubleshooting page) lists the workarounds used here:
  1. `nvidia-ctk system create-dev-char-symlinks --create-all`, now and at every driver load
     through the udev rule it gives (/lib/udev/rules.d/71-nvidia-dev-char.rules);
  2. the k8s device plugin's PASS_DEVICE_SPECS=true (core.bootstrap.volcano.nvidia_plugin), so
     the kubelet passes the device nodes themselves, which the cgroup keeps.
"""

from __future__ import annotations

from core.bootstrap.plan import NodeTarget

NVIDIA_CTK = "/usr/bin/nvidia-ctk"  # where the nvidia-container-toolkit package puts it
CREATE_LINKS = f"{NVIDIA_CTK} system create-dev-char-symlinks --create-all"
UDEV_RULE_PATH = "/lib/udev/rules.d/71-nvidia-dev-char.rules"
# The rule as NVIDIA gives it (nvidia-container-toolkit #48, "Workarounds"): links made when the
# nvidia driver binds, i.e. at every boot once its kernel modules load.
UDEV_RULE = ("# Written by geotrain (nvidia-container-toolkit #48): /dev/char links for the NVIDIA\n"
             "# device nodes, so a systemd daemon-reload keeps them in running pods.\n"
             f'ACTION=="add", DEVPATH=="/bus/pci/drivers/nvidia", RUN+="{CREATE_LINKS}"\n')


def keep_devices_across_reload(target: NodeTarget) -> str | None:
    """Install the udev rule and make the links now (idempotent: --create-all skips existing
    links); None where the node has no systemd (no systemd cgroup driver, no reload to survive)."""
    if not (target.facts.get("init") or {}).get("systemd"):
        return None
    if target.session.ensure_file(UDEV_RULE_PATH, UDEV_RULE, mode=0o644):
        target.session.change("udevadm control --reload-rules || true", what="reloading udev rules")
    target.session.change(CREATE_LINKS, what="creating /dev/char links for the NVIDIA devices")
    return "/dev/char links for the NVIDIA devices"
