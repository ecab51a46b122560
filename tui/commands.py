"""The command palette (`:` or ctrl+p): jump to any view or workspace, switch theme."""

from __future__ import annotations

import asyncio
from functools import partial

from textual.command import DiscoveryHit, Hit, Hits, Provider
from textual.markup import escape


class JumpCommands(Provider):
    def _commands(self, workspace_ids: list[str]) -> list[tuple[str, object, str]]:
        app = self.app
        fixed = [
            ("Workspaces", partial(app.switch_mode, "workspaces"), "every workspace on every cluster"),
            ("Nodes", partial(app.switch_mode, "nodes"), "the node pool: import, refresh, remove"),
            ("Clusters", partial(app.switch_mode, "clusters"), "every cluster, its last check; check, cordon"),
            ("Deploy a workspace…", app.action_deploy_form, "the deploy form"),
            ("Deploy the default workspace", app.action_deploy_default,
             "tiny gpt-neo, 2 workers, medium compression, on local"),
            ("Switch theme", app.action_next_theme, "dark / light; remembered"),
        ]
        if "wizard" in app.MODES:
            fixed.insert(2, ("Cluster wizard", partial(app.switch_mode, "wizard"),
                             "build a cluster on pool nodes"))
        return fixed + [(f"Open workspace {ws_id}", partial(app.open_workspace, ws_id),
                         "status, logs and curves") for ws_id in workspace_ids]

    async def _workspace_ids(self) -> list[str]:
        service = self.app.service
        found = await asyncio.to_thread(service.list, False)
        return [ws.id for ws in found]

    async def discover(self) -> Hits:
        for name, action, help_text in self._commands([]):
            yield DiscoveryHit(name, action, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for name, action, help_text in self._commands(await self._workspace_ids()):
            score = matcher.match(name)
            if score > 0:
                yield Hit(score, matcher.highlight(escape(name)), action, help=help_text)  # ids are data
