"""Fact parsers, fed outputs recorded on real servers (tests/nodes/fixtures)."""

from __future__ import annotations

from pathlib import Path

from core.nodes import facts
from core.nodes.facts import (addresses, containerd, cpu, disk, docker, gpus, init, k3s, listening,
                              public_ip, sudo, system)
from core.nodes.status import status_for

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_nvidia_one_gpu_driver_550():
    found = gpus.parse_nvidia(fixture("nvidia_1gpu_550.txt"))
    assert found == {"gpus": [{"vendor": "nvidia", "index": 0, "name": "NVIDIA H100 80GB HBM3",
                               "memory_mb": 81559, "driver": "550.54.15"}], "error": None}


def test_nvidia_eight_gpus_driver_535():
    found = gpus.parse_nvidia(fixture("nvidia_8gpu_535.txt"))["gpus"]
    assert [g["index"] for g in found] == list(range(8))
    assert {g["name"] for g in found} == {"NVIDIA A100-SXM4-80GB"}
    assert {g["driver"] for g in found} == {"535.161.08"}
    assert all(g["memory_mb"] == 81920 for g in found)


def test_nvidia_smi_without_driver_is_an_error_not_a_gpu():
    found = gpus.parse_nvidia(fixture("nvidia_no_driver.txt"))
    assert found["gpus"] == []
    assert "couldn't communicate with the NVIDIA driver" in found["error"]


def test_rocm_5x_lowercase_card_series():
    found = gpus.parse_rocm(fixture("rocm_5x_card_series.json"))["gpus"]
    assert [(g["index"], g["name"], g["memory_mb"]) for g in found] == [
        (0, "Arcturus GL-XL [AMD Instinct MI100]", 32752), (1, "Arcturus GL-XL [AMD Instinct MI100]", 32752)]


def test_rocm_6x_capitalised_card_series():
    found = gpus.parse_rocm(fixture("rocm_6x_Card_Series.json"))["gpus"]
    assert [g["name"] for g in found] == ["AMD Instinct MI300X OAM"] * 2
    assert found[0]["memory_mb"] == 196288 and found[0]["gfx"] == "gfx942"


def test_rocm_62_device_name_spelling():
    (gpu,) = gpus.parse_rocm(fixture("rocm_62_device_name.json"))["gpus"]
    assert gpu["name"].startswith("Navi 31") and gpu["memory_mb"] == 20464


def test_rocm_absent_or_garbled():
    assert gpus.parse_rocm("") == {"gpus": [], "error": None, "kfd": False}
    assert gpus.parse_rocm("kfd\n")["kfd"]  # the amdgpu compute driver, no rocm-smi
    assert "no valid JSON" in gpus.parse_rocm("WARNING: banner\n{not json")["error"]


def test_host_with_docker_engine_is_blocked_and_has_eight_gpus():
    found = facts.parse_all(fixture("host_ubuntu2204_docker_8gpu.txt"))
    assert found["system"]["os_id"] == "ubuntu" and found["system"]["os_version"] == "22.04"
    assert found["cpu"] == {"model": "Intel(R) Xeon(R) Platinum 8480+", "cores": 224}
    assert found["memory"]["total_mb"] == 2063835
    assert found["disk"]["free_gb"] == 1439.6
    assert len(found["gpus"]) == 8 and found["public_ip"] == "198.51.100.23"
    assert found["docker"]["engine"] and found["docker"]["cli"]
    assert found["containerd"] == {"installed": True, "version": "1.6.31", "running": True}
    assert not listening.holders(found["listening"], "udp", 51820)
    assert found["wireguard"] == {"tools": False, "wireguard_go": False, "kernel_module": True,
                                  "interfaces": ["wg0"]}
    status, reasons = status_for(found, None)
    assert status == "BLOCKED"
    assert len(reasons) == 1 and "Docker engine" in reasons[0] and "dockerd" in reasons[0]


def test_host_without_sudo_and_busy_wireguard_port():
    found = facts.parse_all(fixture("host_ubuntu2404_nosudo_arm.txt"))
    assert found["system"]["arch"] == "aarch64" and found["cpu"]["model"] == "Neoverse-V2"
    assert found["sudo"] == {"user": "ubuntu", "root": False, "passwordless": False,
                             "sudo": "password-required"}
    assert not found["docker"]["engine"] and found["docker"]["cli"]  # a CLI alone is harmless
    assert listening.holders(found["listening"], "udp", 51820) == [""]  # /proc/net: no process
    assert found["public_ip"] is None
    status, reasons = status_for(found, None)
    assert status == "BLOCKED"
    assert any("ubuntu needs a password for sudo" in r for r in reasons)
    assert any("51820" in r for r in reasons)
    assert not any("Docker" in r for r in reasons)
    # in a geotrain cluster, our own WireGuard holds 51820: not a blocker there
    assert not any("51820" in r for r in status_for(found, "c1")[1])


def test_recorded_test_host_is_available():
    found = facts.parse_all(fixture("host_debian12_testhost.txt"))
    assert found["system"]["system"] == "Linux" and found["system"]["os_id"] == "debian"
    assert found["gpus"] == [] and found["sudo"]["root"]
    assert status_for(found, None) == ("AVAILABLE", [])


def test_non_linux_uname():
    found = facts.parse_all(fixture("host_darwin.txt"))
    assert found["system"]["system"] == "Darwin" and found["system"]["arch"] == "arm64"


def test_containerd_version_from_the_package_or_the_binary():
    # a packaged /usr/bin/containerd: the dpkg version, upstream part only (no binary started)
    assert containerd.parse("bin /usr/bin/containerd\npackage 1.7.24~ds1-1ubuntu1\nrunning") == \
        {"installed": True, "version": "1.7.24~ds1", "running": True}
    assert containerd.parse("bin /usr/bin/containerd\npackage 1:1.6.31-1")["version"] == "1.6.31"
    # elsewhere (a release tarball in /usr/local/bin): what the binary says
    assert containerd.parse("bin /usr/local/bin/containerd\n"
                            "containerd github.com/containerd/containerd v1.7.2 abc")["version"] == "1.7.2"
    assert containerd.parse("") == {"installed": False, "version": None, "running": False}


def test_small_parsers_on_empty_or_odd_output():
    assert system.parse("")["system"] == "unknown"
    assert cpu.parse("") == {"model": "unknown", "cores": 0}
    assert disk.parse("df: /: No such file") == {"total_gb": 0.0, "free_gb": 0.0, "var_lib_free_gb": 0.0}
    assert docker.parse("") == {"engine": False, "cli": False, "evidence": []}
    assert sudo.parse("bob\nno-sudo")["sudo"] == "no-sudo"
    assert listening.parse(" 7: 00000000:CA6D 00000000:0000 07") == [("udp", 51821, "")]
    assert init.parse("") == {"pid1": "", "systemd": False}
    assert addresses.parse("") == [] and listening.parse("") == []
    assert public_ip.parse("<html>rate limited</html>") is None
    leftover = k3s.parse("data /var/lib/rancher/k3s")  # uninstalled: no binary, data kept
    assert not leftover["installed"] and leftover["data_dir"]
    assert k3s.parse("bin /usr/local/bin/k3s\nk3s version v1.30.2+k3s1 (faeaf1b0)")["version"] == "v1.30.2+k3s1"
    assert public_ip.parse("2001:db8::1\n") == "2001:db8::1"


def test_script_marks_every_family_once():
    text = facts.script(("http://example.invalid/ip",))
    for name in list(facts.FAMILIES) + ["public_ip"]:
        assert text.count(f"{facts.MARKER}{name}'") == 1
    assert "example.invalid" in text
    assert "curl" not in facts.script(())


def test_listening_sockets_from_ss_or_proc():
    # ss -Hlntup (iproute2): IPv6 brackets, `*` for any address, no process for the kernel's
    ss = ('tcp LISTEN 0 4096 [::]:6443 [::]:* users:(("k3s-server",pid=9,fd=7))\n'
          "udp UNCONN 0 0 *:8472 *:*\n")
    assert listening.parse(ss) == [("tcp", 6443, "k3s-server"), ("udp", 8472, "")]
    # without ss: /proc/net/tcp counts LISTEN (0A) only; the udp header ends in "drops"
    proc = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
            "   0: 00000000:2802 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1\n"
            "   1: 0A000001:0016 0A000002:D431 01 00000000:00000000 00:00000000 00000000     0        0 2\n"
            "   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n"
            "   2: 00000000:2118 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 3 2 0 0\n")
    assert listening.parse(proc) == [("tcp", 10242, ""), ("udp", 8472, "")]


def test_addresses_init_and_var_lib_from_command_output():
    ip = ("1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
          "2: eth0    inet 10.0.0.5/24 brd 10.0.0.255 scope global eth0\\       valid_lft forever\n")
    assert addresses.parse(ip) == ["127.0.0.1", "10.0.0.5"]
    assert init.parse("systemd\n") == {"pid1": "systemd", "systemd": True}
    df = ("Filesystem 1024-blocks Used Available Capacity Mounted on\n"
          "/dev/sda1 104857600 0 52428800 50% /\n/dev/sdb1 20971520 0 2097152 90% /var/lib\n")
    assert disk.parse(df) == {"total_gb": 100.0, "free_gb": 50.0, "var_lib_free_gb": 2.0}
