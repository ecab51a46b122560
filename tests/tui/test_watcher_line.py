"""The workspace detail shows a Kubernetes workspace's watcher (issue 40): when it last wrote, the
recoveries used, the pods running and the datacenters in its elastic quorum, read from its history
ConfigMap through the stand-in API server (tests/kubernetes/fake_api_server.py); the cluster's words
shown literally, never as markup."""

import asyncio
import json
import time

from core.cli import main
from tests.kubernetes.conftest import fake, kubeconfig, make_spec  # noqa: F401 (fixtures)
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.workspace_detail import WorkspaceDetailScreen


def test_the_detail_shows_the_watchers_line(fake, kubeconfig, geotrain_home):  # noqa: F811
    from core.workspaces import WorkspaceService

    assert main(["clusters", "add-kubernetes", "away", "--kubeconfig", kubeconfig]) == 0
    service = WorkspaceService()
    ws = service.deploy(make_spec(cluster="away", workers=2), {})
    history = fake.objects[("configmaps", "default", f"gt-{ws.id}-history")]
    history["data"] = {"history.json": "[]", "watcher.json": json.dumps(
        {"updated_at": time.time() - 4, "used": 1, "budget": 3, "pods": 2, "running": 2,
         "quorum": {"outer_step": 7, "workers": 3, "datacenters": {"dc-a": 2, "[b]dc-b[/b]": 1}}})}
    app = make_app(service, **states.app_options())

    async def run():
        async with app.run_test(size=(160, 40)) as pilot:
            app.push_screen(WorkspaceDetailScreen(ws.id))
            await on_screen(pilot, WorkspaceDetailScreen)
            await until(pilot, lambda: "watcher" in str(app.screen.query_one("#status").render()))
            shown = " ".join(str(app.screen.query_one("#status").render()).split())
            assert "watcher (in the cluster): last seen 4s ago, 1 of 3 recoveries used, 2 of 2 pods running" in shown \
                or "watcher (in the cluster): last seen 5s ago, 1 of 3 recoveries used, 2 of 2 pods running" in shown
            assert "; quorum at outer step 7: dc-a (2 workers), [b]dc-b[/b] (1 worker)" in shown  # literally
    asyncio.run(run())
