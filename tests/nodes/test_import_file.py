"""Import files (YAML, CSV): servers read in order, every mistake named with its line."""

from __future__ import annotations

import pytest

from core.errors import InvalidInput
from core.nodes.import_file import read_import_file


def write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_yaml_list_under_nodes(tmp_path):
    path = write(tmp_path, "servers.yaml", """\
nodes:
  - name: gpu-1
    endpoint: 203.0.113.7
    username: ubuntu
    ssh_key_path: ~/.ssh/id_ed25519
    datacenter: fra
  - name: gpu-2
    endpoint: "[2001:db8::2]:2222"
    username: root
    jump: bastion@198.51.100.1:22
    trust_host_key: SHA256:uNiVztksCsDhcc0u9e8BujQXVUpKZIDTMczCvj3tD2s
""")
    a, b = read_import_file(path)
    assert (a.name, a.host, a.port, a.username, a.key_path, a.datacenter) == (
        "gpu-1", "203.0.113.7", 22, "ubuntu", "~/.ssh/id_ed25519", "fra")
    assert (b.host, b.port, b.jump) == ("2001:db8::2", 2222, "bastion@198.51.100.1:22")
    assert b.trust_host_key.startswith("SHA256:") and b.source == "servers.yaml line 7"


def test_csv_with_header(tmp_path):
    path = write(tmp_path, "servers.csv", "name,endpoint,username,datacenter\n"
                                          "a1,10.0.0.1:2200,root,ams\n\nb1,10.0.0.2,ubuntu,\n")
    a, b = read_import_file(path)
    assert (a.name, a.port, a.datacenter) == ("a1", 2200, "ams")
    assert (b.name, b.username, b.datacenter) == ("b1", "ubuntu", None)


@pytest.mark.parametrize("name, text, message", [
    ("bad.yaml", "- name: a\n  endpoint: h\n  username: u\n- name: b\n  endpoint: [h\n",
     "bad.yaml line 6: malformed YAML"),
    ("missing.yaml", "- name: a\n  endpoint: h\n  username: u\n- name: b\n  endpoint: h2\n",
     "missing.yaml line 4: missing username"),
    ("typo.yaml", "- name: a\n  endpoint: h\n  usename: u\n", "typo.yaml line 1: unknown field 'usename'"),
    ("port.yaml", "- name: a\n  endpoint: h:99999\n  username: u\n", "port.yaml line 1: endpoint 'h:99999'"),
    ("shape.yaml", "name: a\n", "shape.yaml: expected a list of servers"),
    ("empty.yaml", "[]\n", "empty.yaml: no servers in the file"),
    ("bad.csv", "name,endpoint,username\na,h,u\nb,h2\n", "bad.csv line 3: missing username"),
    ("extra.csv", "name,endpoint,username\na,h,u,x\n", "extra.csv line 2: more values"),
    ("header.csv", "name,host,username\na,h,u\n", "header.csv line 1: unknown column 'host'"),
])
def test_malformed_files_name_the_line(tmp_path, name, text, message):
    with pytest.raises(InvalidInput) as err:
        read_import_file(write(tmp_path, name, text))
    assert str(err.value).startswith(message), str(err.value)
    assert err.value.hint


def test_missing_file(tmp_path):
    with pytest.raises(InvalidInput, match="does not exist"):
        read_import_file(str(tmp_path / "nope.yaml"))
