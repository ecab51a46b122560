"""Every release file geotrain installs on a node matches a sha256 known beforehand.

The hash is pinned in versions.RELEASE_SHA256 (with its public source) or given by the user
(`--sha256 NAME=HEX`, kept with the cluster), never read from the download's own origin,
which could serve a matching checksum list beside a replaced file. A file with no known hash
is not installed unless the user passed --insecure-skip-checksum: then a download is checked
against its release's own list (it catches corruption, not substitution) and an air-gap
bundle file is taken as it is.
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from pathlib import Path

from core.bootstrap import versions
from core.bootstrap.plan import ClusterPlan, K3sOptions
from core.bootstrap.session import StepFailed
from core.errors import InvalidInput

HEX_RE = re.compile(r"[0-9a-f]{64}")
INSECURE_FLAG = "--insecure-skip-checksum"


def release_files(k3s_version: str) -> dict[str, str]:
    """File name -> release version, for every file geotrain installs from a release."""
    files = {}
    for arch in sorted(set(versions.ARCHES.values())):
        files[versions.k3s_asset(arch)] = k3s_version
        files[versions.airgap_images(arch)] = k3s_version
        files[versions.containerd_tarball(arch)] = versions.CONTAINERD_VERSION
    return files


def expected(options: K3sOptions, name: str) -> str | None:
    """The sha256 `name` must have: pinned for its release, else the user's; None: unknown."""
    release = release_files(options.version).get(name)
    return versions.RELEASE_SHA256.get((release, name)) or options.sha256.get(name)


def unpinned(k3s_version: str, arches) -> list[str]:
    """The release files for `arches` that geotrain pins no sha256 for: the ones a user gives
    (--sha256 NAME=HEX, the wizard's fields)."""
    known = release_files(k3s_version)
    return [name for arch in sorted(set(arches))
            for name in (versions.k3s_asset(arch), versions.airgap_images(arch),
                         versions.containerd_tarball(arch))
            if (known[name], name) not in versions.RELEASE_SHA256]


def checksum_list(k3s_version: str, name: str) -> str:
    """The release's own checksum list that names `name`: where a user reads the value to
    check out of band (never trusted here on its own)."""
    for arch in sorted(set(versions.ARCHES.values())):
        if name == versions.containerd_tarball(arch):
            return versions.containerd_urls(arch)[1]
        if name in (versions.k3s_asset(arch), versions.airgap_images(arch)):
            return versions.k3s_urls(k3s_version, arch)[1]
    raise ValueError(f"{name!r} is not a release file geotrain installs")


def missing_reason(options: K3sOptions, name: str) -> str:
    """Why `name` is refused; the CLI (missing_message) and the app each add what to do."""
    release = release_files(options.version).get(name, options.version)
    return f"no sha256 is known for {name} ({release}), and geotrain installs nothing unverified"


def missing_message(options: K3sOptions, name: str) -> str:
    return (f"{missing_reason(options, name)}: pass the hash you checked against a source you "
            f"trust with `geotrain clusters deploy … --sha256 {name}=HEX`, or {INSECURE_FLAG}")


def parse_given(values: list[str], k3s_version: str) -> dict[str, str]:
    """`--sha256 NAME=HEX` values -> {name: hex}; one line naming what is wrong."""
    known, given = release_files(k3s_version), {}
    for value in values:
        name, _, digest = value.partition("=")
        digest = digest.strip().lower()
        if name not in known:
            raise InvalidInput(f"--sha256 {value!r}: {name!r} is not a file geotrain installs",
                               f"name one of {', '.join(sorted(known))}, e.g. --sha256 k3s=HEX")
        if not HEX_RE.fullmatch(digest):
            raise InvalidInput(f"--sha256 {name}=…: {digest!r} is not a sha256 (64 hex digits)",
                               "copy the whole hash, e.g. from `sha256sum FILE`")
        pinned = versions.RELEASE_SHA256.get((known[name], name))
        if pinned and pinned != digest:
            raise InvalidInput(f"--sha256 {name}={digest} differs from the sha256 geotrain pins "
                               f"for it ({pinned})", "drop that --sha256: the pinned one is checked")
        given[name] = digest
    return given


def check_bytes(options: K3sOptions, name: str, data: bytes, where: str) -> None:
    """Refuse (one line) a bundle file that is not the release's, before it is uploaded."""
    _judge(options, name, hashlib.sha256(data).hexdigest(), where)


def _judge(options: K3sOptions, name: str, have: str, where: str) -> None:
    want = expected(options, name)
    if want is None:
        if not options.insecure_skip_checksum:
            raise StepFailed(missing_message(options, name))
    elif have != want:
        raise StepFailed(f"{where} has sha256 {have}, not the {want} known for {name}: it is not "
                         f"the release's file; replace it with the release's own {name}")


@lru_cache(maxsize=16)
def _file_sha256(path: str, size: int, mtime_ns: int) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_sha256(path: Path) -> str:
    """Hashed once per content (a bundle is judged by every node's preflight)."""
    info = path.stat()
    return _file_sha256(str(path), info.st_size, info.st_mtime_ns)


def problems(plan: ClusterPlan, arch: str, names: list[str]) -> list[str]:
    """Why the files `names` (for one node's `arch`) may not be installed; [] when they may.
    A file in the air-gap bundle is hashed here; a download needs its hash known."""
    found = []
    bundle = Path(plan.k3s.bundle) if plan.k3s.bundle else None
    for name in names:
        local = bundle / name if bundle else None
        try:
            if local is not None and local.is_file():
                _judge(plan.k3s, name, file_sha256(local), f"air-gap bundle file {local}")
            elif expected(plan.k3s, name) is None and not plan.k3s.insecure_skip_checksum:
                raise StepFailed(missing_message(plan.k3s, name))
        except StepFailed as exc:
            found.append(str(exc))
    return found


def verify_download(want: str | None, part: str, fallback: str) -> str:
    """The shell check of a downloaded file: against the known hash, or (no hash, the user
    passed --insecure-skip-checksum) the `fallback` check against the release's own list."""
    if want is None:
        return fallback
    return f"printf '%s  %s\\n' {want} {part} | sha256sum -c -"
