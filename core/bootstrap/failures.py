"""Failures that name the way forward: what a download's exit code means on the node, and
the air-gap bundle that avoids the download.

curl's exit codes (curl(1), "EXIT CODES"): the ones a node without internet, behind a
proxy or a firewall actually meets.
"""

from __future__ import annotations

from pathlib import Path

from core.bootstrap import versions
from core.errors import InvalidInput
from core.bootstrap.session import NodeSession, Result, StepFailed
from core.state.secret_store import redact

CURL_EXIT = {
    5: "the node cannot resolve its proxy's name",
    6: "the node cannot resolve the download host (no DNS, or no internet)",
    7: "the node cannot connect to the download host (no route out, or a firewall)",
    22: "the download host answered with an HTTP error (a wrong version, or a proxy refusing)",
    23: "the node could not write the download (disk full, or the directory is not writable)",
    28: "the download timed out (a slow or filtered link)",
    35: "the TLS handshake failed (a proxy intercepting HTTPS?)",
    56: "the connection broke while downloading (a flaky link or a proxy)",
    60: "the download host's certificate was not trusted (a proxy intercepting HTTPS, or a wrong clock)",
}
OFFLINE = (6, 7, 28, 35, 56, 60, 5)  # where the air-gap bundle is the way forward


def airgap_hint(arch: str = "<arch>") -> str:
    """Where to get the bundle and how to hand it to geotrain (CLI and wizard)."""
    return (f"on a node without internet use the air-gap bundle: put the release's "
            f"{versions.k3s_asset(arch) if arch != '<arch>' else 'k3s'}, "
            f"{versions.airgap_images(arch)} and {versions.containerd_tarball(arch)} in a directory "
            "on this machine and pass it with `geotrain clusters deploy … --k3s-bundle DIR` (in the "
            "wizard: the air-gap bundle field); geotrain uploads it over SSH")


def explain_download(what: str, exit_code: int, arch: str = "<arch>") -> str:
    """The one-line message of a failed download: the code, what it means, what to do."""
    meaning = CURL_EXIT.get(exit_code)
    if meaning is None:
        return f"{what} failed: exit code {exit_code}"
    line = f"{what} failed: exit code {exit_code}: {meaning}"
    return f"{line}; {airgap_hint(arch)}" if exit_code in OFFLINE else line


def download(session: NodeSession, command: str, what: str, arch: str, timeout: float = 900) -> Result:
    """Run a download command; a failure says what its exit code means and offers the bundle."""
    result = session.change(command, timeout=timeout, check=False, what=what)
    if result.ok:
        return result
    lines = (result.stderr or result.stdout).strip().splitlines()
    if result.exit_code in CURL_EXIT or not lines:
        raise StepFailed(explain_download(what, result.exit_code, arch))
    raise StepFailed(f"{what} failed: {redact(lines[-1], session.secrets)}")


def check_bundle(text: str, field: str = "--k3s-bundle") -> Path:
    """The air-gap dir: a k3s binary for some architecture, and no zstd-only image bundle
    (`field` names where it was given: the CLI flag or the wizard's field)."""
    bundle = Path(text).expanduser()
    if not any((bundle / name).is_file() for name in ("k3s", "k3s-arm64")):
        raise InvalidInput(f"{field} {text} has no k3s binary (k3s or k3s-arm64)",
                           f"put the release's k3s, k3s-airgap-images-<arch>.tar and "
                           f"{versions.containerd_tarball('<arch>')} there")
    for zst in sorted(bundle.glob("k3s-airgap-images-*.tar.*")):
        plain = zst.with_name(zst.name.split(".tar")[0] + ".tar")
        if not plain.is_file():
            raise InvalidInput(f"{field} {text} has {zst.name} but not {plain.name}",
                               f"`ctr images import` does not decompress; add the release's "
                               f"plain {plain.name}")
    return bundle.resolve()


# kubectl's words when it cannot fetch a manifest by URL (the server has no way out)
UNREACHABLE = ("no such host", "dial tcp", "i/o timeout", "connection refused", "network is unreachable",
               "unable to read url", "tls handshake timeout", "temporary failure in name resolution")


def apply_failure(what: str, result: Result, session: NodeSession, downloaded: bool) -> str:
    """The message of a failed `kubectl apply -f URL`: kubectl's last line, and where the URL
    could not be reached, the local copy that avoids it."""
    lines = (result.stderr or result.stdout).strip().splitlines()
    detail = redact(lines[-1], session.secrets) if lines else f"exit code {result.exit_code}"
    text = f"{what} failed: {detail}"
    if downloaded and any(word in detail.lower() for word in UNREACHABLE):
        text += ("; the server cannot fetch the manifest: download volcano-development.yaml on a "
                 "machine with internet and pass it with `--volcano-manifest FILE`")
    return text
