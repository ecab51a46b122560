"""The geotrain app: screens, global keys, themes. Everything else lives in screens/.

Only the first screen (workspaces) is imported with the app; every other screen and modal,
and the node pool (SSH), load when first opened, so the first frame comes at once (issue 45).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Callable

from textual.app import App
from textual.binding import Binding
from textual.worker import Worker, WorkerState

from core.workspaces import WorkspaceService
from tui.cluster_builder import ClusterBuilder
from tui.commands import JumpCommands
from tui.palettes import DEFAULT_THEME, THEMES_DIR, load_themes
from tui.screens.workspaces import WorkspacesScreen

if TYPE_CHECKING:
    from core.backends.base import ShellTarget
    from core.nodes.pool import NodePool

THEME_SETTING = "tui.theme"


def _nodes_screen():
    from tui.screens.nodes import NodesScreen

    return NodesScreen()


def _clusters_screen():
    from tui.screens.clusters import ClustersScreen

    return ClustersScreen()


def _wizard_screen():
    from tui.screens.cluster_wizard import ClusterWizardScreen

    return ClusterWizardScreen()


class GeotrainApp(App):
    CSS_PATH = str(THEMES_DIR / "base.tcss")
    TITLE = "geotrain"
    MODES = {"workspaces": WorkspacesScreen, "nodes": _nodes_screen, "wizard": _wizard_screen,
             "clusters": _clusters_screen}
    DEFAULT_MODE = "workspaces"
    COMMANDS = App.COMMANDS | {JumpCommands}
    BINDINGS = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
        Binding("colon", "command_palette", "Jump", show=False),
        Binding("ctrl+t", "next_theme", "Theme", show=False),
        Binding("1", "switch_mode('workspaces')", "Workspaces", show=False),
        Binding("2", "switch_mode('nodes')", "Nodes", show=False),
        Binding("3", "switch_mode('wizard')", "Cluster wizard", show=False),
        Binding("4", "switch_mode('clusters')", "Clusters", show=False),
    ]

    def __init__(self, service: WorkspaceService | None = None, *,
                 clock: Callable[[], float] = time.time, poll_seconds: float = 2.0,
                 log_max_lines: int = 20_000, cluster_builder=None, check_options: dict | None = None) -> None:
        super().__init__()
        self.service = service or WorkspaceService()
        self.cluster_builder = cluster_builder or ClusterBuilder(self.service.store)
        self._node_pool: NodePool | None = None
        self._node_pool_lock = threading.Lock()
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.log_max_lines = log_max_lines
        self.check_options = check_options or {}  # clusters check's seconds, model, size (tests: tiny)
        for theme in load_themes():
            self.register_theme(theme)
        self.theme = self.service.store.get_setting(THEME_SETTING, DEFAULT_THEME) or DEFAULT_THEME
        if self.theme not in self.available_themes:
            self.theme = DEFAULT_THEME

    @property
    def node_pool(self) -> NodePool:
        """The SSH node pool, made when a screen first asks for it (from a worker thread, maybe):
        one pool, so that its prompts come one at a time."""
        with self._node_pool_lock:
            if self._node_pool is None:
                from core.nodes.pool import NodePool, Prompts
                from tui.modals.prompts import host_key_confirmer, passphrase_asker

                self._node_pool = NodePool(self.service.store, Prompts(
                    confirm_host_key=host_key_confirmer(self), ask_passphrase=passphrase_asker(self)))
            return self._node_pool

    def watch_theme(self, name: str) -> None:
        if self.is_running:
            self.service.store.set_setting(THEME_SETTING, name)

    def action_next_theme(self) -> None:
        names = [n for n in self.available_themes if n.startswith("geotrain-")]
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names \
            else DEFAULT_THEME

    # navigation: screens ask the app, so that no screen imports another ----
    def open_workspace(self, workspace_id: str, replace: bool = False) -> None:
        """Show one workspace; `replace` swaps it for the current screen (the deploy form)."""
        from tui.screens.workspace_detail import WorkspaceDetailScreen

        if replace:
            self.switch_screen(WorkspaceDetailScreen(workspace_id))
            return
        self.switch_mode("workspaces")
        self.push_screen(WorkspaceDetailScreen(workspace_id))

    def open_processes(self, workspace_id: str) -> None:
        from tui.screens.workspace_processes import WorkspaceProcessesScreen

        self.push_screen(WorkspaceProcessesScreen(workspace_id))

    def open_cluster_check(self, cluster: str) -> None:
        """The Clusters view, checking `cluster` (the wizard's done screen offers it)."""
        self.switch_mode("clusters")
        self.screen.check_when_loaded(cluster)

    def run_in_terminal(self, target: ShellTarget) -> int | None:
        """Give the terminal to a shell (core.backends.base.ShellTarget: a local process, its
        environment as env= and never in argv, or a pod's exec stream) until it exits, then come
        back (Textual's App.suspend)."""
        from textual.app import SuspendNotSupported

        try:
            with self.suspend():
                return target.run()
        except SuspendNotSupported:
            self.notify("this terminal cannot be handed to a shell; use `geotrain workspaces shell ID --rank N`",
                        severity="error", markup=False)
            return None

    def action_deploy_form(self) -> None:
        from tui.screens.workspace_deploy import DeployScreen

        self.switch_mode("workspaces")
        self.push_screen(DeployScreen())

    def open_config_editor(self, text: str, done: Callable[[str | None], None]) -> None:
        from tui.screens.config_editor import ConfigEditorScreen  # tree-sitter YAML: on first open

        self.push_screen(ConfigEditorScreen(text), done)

    def open_node_import(self, done: Callable[[object], None]) -> None:
        from tui.screens.node_import import NodeImportScreen

        self.push_screen(NodeImportScreen(), done)

    def open_node_log(self, node: str, path) -> None:
        from tui.modals.node_log import NodeLogScreen

        self.push_screen(NodeLogScreen(node, path))

    def action_deploy_default(self) -> None:
        self.switch_mode("workspaces")
        self.screen.action_deploy_default()

    def action_help(self) -> None:
        from tui.modals.help import HelpScreen, key_label

        if isinstance(self.screen, HelpScreen):
            return
        keys, seen = [], set()
        for key, active in self.screen.active_bindings.items():
            binding = active.binding
            if active.node is not self.screen or binding.action in seen or not binding.description:
                continue
            seen.add(binding.action)
            keys.append((key_label(key), binding.description))
        self.push_screen(HelpScreen(str(self.screen.title or self.title), keys))

    def _fatal_error(self) -> None:
        """Textual's crash report, without local variables: a frame's locals can hold a
        token being deployed, and the report is printed to the terminal (and pasted into issues).
        (Overrides textual.app.App._fatal_error, which passes show_locals=True.)"""
        import rich
        from rich.segment import Segments
        from rich.traceback import Traceback

        self.bell()
        traceback = Traceback(show_locals=False, width=None, suppress=[rich])
        self._exit_renderables.append(Segments(self.console.render(traceback, self.console.options)))
        self._close_messages_no_wait()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failed worker becomes a message to the user."""
        if event.state != WorkerState.ERROR or event.worker.error is None:
            return
        from tui.modals.error import ErrorScreen

        if isinstance(self.screen, ErrorScreen):
            return
        self.push_screen(ErrorScreen(f"{event.worker.name} failed", event.worker.error))


def make_app(service: WorkspaceService | None = None, **options) -> GeotrainApp:
    """The app with its collaborators; tests pass their own service, clock and poll rate."""
    return GeotrainApp(service, **options)


def run_app() -> int:
    make_app().run()
    return 0
