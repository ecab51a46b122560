"""The wizard's release checksums: a sha256 field for each release file geotrain pins none
for (the picked nodes' architectures; the image tarballs only with an air-gap bundle), and
the explicit opt-out. Values go through core's parser, so the app and `clusters deploy
--sha256` accept the same ones and refuse the rest in the same words."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Checkbox, Input, Static

from core.bootstrap import checksums, versions
from core.domain.records import Node
from tui.cluster_builder import UNVERIFIED_LABEL
from tui.widgets.form_field import FormField

UNVERIFIED_WARNING = ("⚠ then only the release's own checksum list is checked: a replaced k3s "
                      "would run as root on every node")


def node_arch(node: Node) -> str | None:
    """The release architecture of a node's recorded `uname -m`; None: none exists (the
    pool's rules block such a node)."""
    try:
        return versions.release_arch(node.facts.get("system", {}).get("arch"))
    except versions.UnsupportedArch:
        return None


def field_id(name: str) -> str:
    return "sha256-" + name.replace(".", "-")


class ReleaseChecksums(Vertical):
    DEFAULT_CSS = """
    ReleaseChecksums { height: auto; }
    ReleaseChecksums #unverified-warning { color: $warning; padding: 0 1; }
    """

    def __init__(self, k3s_version: str = versions.K3S_VERSION, **kwargs) -> None:
        super().__init__(**kwargs)
        self.k3s_version = k3s_version
        self.names = checksums.unpinned(k3s_version, set(versions.ARCHES.values()))
        self.arches: set[str] = {"amd64"}
        self.bundle = False

    def compose(self) -> ComposeResult:
        for name in self.names:
            where = checksums.checksum_list(self.k3s_version, name).rsplit("/", 1)[-1]
            yield FormField(f"sha256 of {name} · its line in {where}, checked out of band · "
                            "empty: refused",
                            Input(placeholder="64 hex digits", id=field_id(name)))
        yield Checkbox(UNVERIFIED_LABEL, False, id="insecure-skip-checksum")
        yield Static(UNVERIFIED_WARNING, id="unverified-warning", markup=False)

    def on_mount(self) -> None:
        self._show()

    def select(self, nodes: list[Node]) -> None:
        """Show the fields the picked nodes' architectures need."""
        self.arches = {arch for arch in map(node_arch, nodes) if arch} or {"amd64"}
        self._show()

    def set_bundle(self, given: bool) -> None:
        self.bundle = given
        self._show()

    def _needed(self, name: str) -> bool:
        wanted = checksums.unpinned(self.k3s_version, self.arches)
        is_images = any(name == versions.airgap_images(arch) for arch in self.arches)
        return name in wanted and (self.bundle or not is_images)

    def _show(self) -> None:
        for name in self.names:
            self.query_one(f"#{field_id(name)}", Input).parent.display = self._needed(name)

    def read(self) -> tuple[dict[str, str], bool]:
        """({file: sha256} of the shown, filled fields; the opt-out). Raises InvalidInput
        with the CLI's line for a value `--sha256` would refuse."""
        given = [f"{name}={self.query_one(f'#{field_id(name)}', Input).value}"
                 for name in self.names if self._needed(name)
                 and self.query_one(f"#{field_id(name)}", Input).value.strip()]
        return (checksums.parse_given(given, self.k3s_version),
                self.query_one("#insecure-skip-checksum", Checkbox).value)
