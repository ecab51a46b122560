"""Issue 38.13: every release file geotrain installs matches a sha256 known beforehand (pinned
with its source, or given by the user), never a checksum list from the file's own origin; an
air-gap bundle file is checked too; the Volcano manifest applied as cluster-admin is the one
geotrain ships, or a download checked against its pin. Each refusal is one line and comes
before anything changes."""

from __future__ import annotations

import hashlib
import http.server
import threading
from pathlib import Path

import pytest

from core.bootstrap import checksums, failures, k3s, preflight, versions, volcano
from core.bootstrap.deploy import build_plan, deploy
from core.bootstrap.plan import ClusterPlan, NodeSpec
from core.bootstrap.session import CommandLog, NodeSession, StepFailed
from core.cli import main
from core.errors import InvalidInput
from core.state.store import Store
from tests.bootstrap.cluster_hosts import MESH_SUBNET, PREFIX, SUBNET, ShellFactory, add_host_nodes
from tests.bootstrap.local_shell import LocalShell

REPO = Path(__file__).resolve().parents[2]
FACTS = {"system": {"arch": "x86_64"}, "containerd": {"installed": True, "version": versions.CONTAINERD_VERSION}}


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_only_public_sources_are_pinned_and_every_paired_volcano_has_a_hash():
    known = checksums.release_files(versions.K3S_VERSION)
    for (release, name), digest in versions.RELEASE_SHA256.items():
        assert known[name] == release and checksums.HEX_RE.fullmatch(digest)
    assert set(versions.VOLCANO_FOR_K8S.values()) == set(versions.VOLCANO_MANIFEST_SHA256)
    # nothing pinned for k3s v1.35.5+k3s1 (no public source found): a download needs --sha256
    assert checksums.expected(ClusterPlan("c", []).k3s, "k3s") is None


def test_an_unverified_k3s_download_is_a_one_line_blocker():
    plan = ClusterPlan("c", [NodeSpec("n", "198.51.100.10", "server")])
    [blocker] = preflight.checksum_blockers(plan, FACTS, ["preflight", "containerd", "k3s"])
    assert blocker.startswith(f"no sha256 is known for k3s ({versions.K3S_VERSION})")
    assert "--sha256 k3s=HEX" in blocker and "--insecure-skip-checksum" in blocker
    assert "\n" not in blocker
    plan.k3s.sha256 = {"k3s": "ab" * 32}
    assert preflight.checksum_blockers(plan, FACTS, ["preflight", "containerd", "k3s"]) == []
    plan.k3s.sha256 = {}
    plan.k3s.insecure_skip_checksum = True  # the user's explicit choice
    assert preflight.checksum_blockers(plan, FACTS, ["preflight", "k3s"]) == []
    on_version = {**FACTS, "k3s": {"version": versions.K3S_VERSION}}  # nothing to install
    assert preflight.checksum_blockers(ClusterPlan("c", []), on_version, ["k3s"]) == []


def test_a_tampered_bundle_file_is_a_one_line_blocker(tmp_path):
    tarball = versions.containerd_tarball("amd64")
    (tmp_path / "k3s").write_bytes(b"the release's k3s")
    (tmp_path / tarball).write_bytes(b"not containerd")  # its sha256 is pinned
    plan = ClusterPlan("c", [NodeSpec("n", "198.51.100.10", "server")])
    plan.k3s.bundle, plan.k3s.sha256 = str(tmp_path), {"k3s": _sha(b"the release's k3s")}
    old = {**FACTS, "containerd": {"installed": True, "version": "1.6.20"}}
    [blocker] = preflight.checksum_blockers(plan, old, ["containerd", "k3s"])
    assert blocker == (f"air-gap bundle file {tmp_path / tarball} has sha256 {_sha(b'not containerd')}, "
                       f"not the {versions.RELEASE_SHA256[(versions.CONTAINERD_VERSION, tarball)]} known for {tarball}: "
                       f"it is not the release's file; replace it with the release's own {tarball}")
    (tmp_path / "k3s").write_bytes(b"a replaced k3s")
    assert len(preflight.checksum_blockers(plan, old, ["containerd", "k3s"])) == 2


def test_user_hashes_are_checked_where_they_are_given():
    given = checksums.parse_given(["k3s=" + "AB" * 32, "k3s-airgap-images-arm64.tar=" + "cd" * 32],
                                  versions.K3S_VERSION)
    assert given == {"k3s": "ab" * 32, "k3s-airgap-images-arm64.tar": "cd" * 32}
    for value, words in (("kubectl=" + "ab" * 32, "is not a file geotrain installs"),
                         ("k3s=abc", "is not a sha256"),
                         (f"{versions.containerd_tarball('amd64')}={'ab' * 32}", "differs from the sha256")):
        with pytest.raises(InvalidInput, match=words) as caught:
            checksums.parse_given([value], versions.K3S_VERSION)
        assert "\n" not in caught.value.message


def test_the_cli_keeps_given_hashes_with_the_cluster(geotrain_home, capsys):
    from core.domain.records import Node
    from core.state.node_records import add_nodes

    add_nodes(Store(), [Node(name="n0", host="198.51.100.10", username="root")])
    assert main(["clusters", "deploy", "c1", "--nodes", "n0", "--sha256", "k3s=x"]) == 2
    assert "is not a sha256" in capsys.readouterr().err
    assert main(["clusters", "deploy", "c1", "--nodes", "n0", "--dry-run", "--only", "k3s",
                 "--sha256", "k3s=" + "ab" * 32]) == 0
    out = capsys.readouterr().out
    assert f"printf '%s  %s\\n' {'ab' * 32} /usr/local/bin/k3s.download | sha256sum -c -" in out
    assert "sha256sum-amd64.txt" not in out  # never the release's own list


class _Files(http.server.BaseHTTPRequestHandler):
    served: dict[str, bytes] = {}

    def do_GET(self) -> None:
        body = self.served.get(self.path, b"")
        self.send_response(200 if self.path in self.served else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def release_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Files)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_replaced_download_is_refused_even_beside_a_matching_list(tmp_path, monkeypatch,
                                                                    release_server):
    """The origin serves a replaced binary and a checksum list that matches it: the known
    sha256 refuses it, nothing is installed; the release's own file installs."""
    _Files.served = {"/k3s": b"replaced", "/sha256sum-amd64.txt": f"{_sha(b'replaced')}  k3s\n".encode()}
    monkeypatch.setattr(versions, "k3s_urls", lambda v, a: (f"{release_server}/k3s",
                                                            f"{release_server}/sha256sum-amd64.txt"))
    session = NodeSession("gpu1", LocalShell(), tmp_path / "gpu1.log", CommandLog(), [], sudo=False)
    binary = tmp_path / "k3s"
    good = _sha(b"the release's k3s")
    with pytest.raises(StepFailed) as failed:
        failures.download(session, k3s.download_command(versions.K3S_VERSION, "amd64", str(binary), good),
                          "downloading k3s (amd64)", "amd64")
    assert str(failed.value).startswith("downloading k3s (amd64) failed: ") and "\n" not in str(failed.value)
    assert not binary.exists()
    _Files.served["/k3s"] = b"the release's k3s"
    command = k3s.download_command(versions.K3S_VERSION, "amd64", str(binary), good)
    assert session.change(command).ok and binary.read_bytes() == b"the release's k3s"


def test_k3s_refuses_on_a_real_host_before_anything_changes(make_test_hosts, geotrain_home, tmp_path):
    hosts = make_test_hosts(1, prefix=PREFIX, subnet=SUBNET)
    store = Store()
    plan = build_plan(store, "unpinned", add_host_nodes(store, hosts), subnet=MESH_SUBNET)
    plan.k3s.bin_dir, plan.k3s.config_dir = "/run/geotrain/bin", "/run/geotrain/k3s"
    # no preflight: the k3s step itself refuses the unverified download
    result = deploy(plan, only=["k3s"], shell_factory=ShellFactory(hosts), store=store)
    [failure] = result.summary.failures
    assert (failure.step, failure.phase) == ("k3s", "install")
    assert failure.message.startswith("no sha256 is known for k3s") and "\n" not in failure.message
    assert result.command_log.changes() == []
    assert hosts[0].run("test -e /run/geotrain/bin", check=False).returncode != 0
    # a bundle whose k3s is not the one the given hash names: refused before the upload
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "k3s").write_bytes(b"#!/bin/sh\necho replaced\n")
    plan.k3s.bundle, plan.k3s.sha256 = str(bundle), {"k3s": _sha(b"the release's k3s")}
    result = deploy(plan, only=["k3s"], shell_factory=ShellFactory(hosts), store=store)
    [failure] = result.summary.failures
    assert failure.message.startswith(f"air-gap bundle file {bundle / 'k3s'} has sha256 ")
    assert result.command_log.changes() == []
    assert hosts[0].run("test -e /run/geotrain/bin/k3s", check=False).returncode != 0


def test_volcano_is_the_shipped_release_or_a_checked_download():
    shipped = REPO / "core" / "bootstrap" / "volcano-v1.11.0.yaml"
    assert _sha(shipped.read_bytes()) == versions.VOLCANO_MANIFEST_SHA256["v1.11.0"]
    assert volcano.shipped_manifest("v1.11.0") == shipped.read_bytes()
    assert '"*.yaml"' in (REPO / "pyproject.toml").read_text()  # package data: it is installed
    log = CommandLog()
    session = NodeSession("gpu0", None, None, log, [], dry_run=True)
    assert volcano._manifest_on_server("v1.12.0", None, session) == \
        f"{volcano.REMOTE_DIR}/volcano-v1.12.0.yaml"
    [fetch] = [r.command for r in log.records if "curl" in r.command]
    assert versions.VOLCANO_MANIFEST_SHA256["v1.12.0"] in fetch and "sha256sum -c -" in fetch
    assert fetch.index("sha256sum -c -") < fetch.index("&& mv ")  # checked before it is used
    with pytest.raises(StepFailed, match="no sha256 is known for the Volcano v9.9.9 manifest"):
        volcano._manifest_on_server("v9.9.9", None, session)


def test_a_damaged_shipped_manifest_is_refused(monkeypatch):
    monkeypatch.setitem(versions.VOLCANO_MANIFEST_SHA256, "v1.11.0", "ab" * 32)
    with pytest.raises(StepFailed, match="is not the release's: reinstall geotrain"):
        volcano.shipped_manifest("v1.11.0")


def test_the_files_a_user_gives_and_where_their_hashes_are_listed():
    """The wizard shows a field for each (tui/widgets/release_checksums.py); containerd is pinned."""
    version = versions.K3S_VERSION
    assert checksums.unpinned(version, ["amd64"]) == ["k3s", "k3s-airgap-images-amd64.tar"]
    assert checksums.unpinned(version, ["arm64", "amd64"])[2:] == ["k3s-arm64",
                                                                   "k3s-airgap-images-arm64.tar"]
    assert checksums.checksum_list(version, "k3s-airgap-images-arm64.tar") == (
        versions.k3s_urls(version, "arm64")[1])  # …/sha256sum-arm64.txt
    assert checksums.checksum_list(version, versions.containerd_tarball("amd64")).endswith(
        versions.containerd_tarball("amd64") + ".sha256sum")
    options = ClusterPlan("c", []).k3s
    assert checksums.missing_message(options, "k3s").startswith(
        checksums.missing_reason(options, "k3s") + ": pass the hash")
