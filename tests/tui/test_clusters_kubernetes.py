"""From a failing check to a cordoned node in the app, on a registered Kubernetes cluster (issue 43): `k`
runs core.cluster_checks' Volcano check job through the real `kubernetes` client against the stand-in API
server (tests/kubernetes/fake_api_server.py); the test plays kubelet as tests/kubernetes/test_check_job.py
does (one pod's log is a real rank's output, the other's an ECC error); the view names n2 failing with
why, and `c` on its row cordons it: the PATCH is observed by the stand-in."""

from __future__ import annotations

import asyncio

from textual.widgets import DataTable

from core.domain.records import Cluster
from core.kubernetes.check_job import job_name
from core.state.cluster_records import save_cluster
from core.workspaces import WorkspaceService
from tests.kubernetes.conftest import fake, write_kubeconfig  # noqa: F401 (fixture)
from tests.kubernetes.test_check_job import _ranks
from tests.tui import states
from tests.tui.test_clusters import cells, notes, open_cluster, shown
from tests.tui.waiting import until
from tui.app import make_app

ECC = "RuntimeError: CUDA error: uncorrectable ECC error encountered"


def play_kubelet(fake, job: str, tmp_path) -> str:
    """n1's pod prints a real rank's line, n2's fails with an ECC error; returns n2's pod."""
    outputs = _ranks(fake.objects[("secrets", "default", f"{job}-token")]["stringData"]["token"], 2, tmp_path)
    for index, (node, output, code) in enumerate((("n1", outputs[0], 0), ("n2", ECC + "\n", 1))):
        pod = fake.add_pod(job, "check", index)
        fake.objects[("pods", "default", pod)]["spec"] = {"nodeName": node}
        fake.write_log(pod, output.encode())
        fake.end_container(pod, code)
    return pod


def test_k_names_the_failing_node_and_c_cordons_it(fake, tmp_path, geotrain_home):  # noqa: F811
    fake.nodes = [{"metadata": {"name": name}, "status": {"allocatable": {"cpu": "8"}}} for name in ("n1", "n2")]
    service = WorkspaceService()
    config = {"context": "fake-ctx", "node_groups": [{"vendor": "cpu", "gpus": 0, "nodes": ["n1", "n2"]}]}
    save_cluster(service.store, Cluster(name="dc", kind="kubernetes", config=config,
                                        kubeconfig_path=write_kubeconfig(tmp_path / "kubeconfig", fake.url)), create=True)
    app = make_app(service, check_options={"seconds": 0.2, "size": "tiny"}, **states.app_options())

    async def run():
        async with app.run_test(size=(200, 40)) as pilot:
            await open_cluster(pilot, "dc")
            await until(pilot, lambda: [r[0] for r in cells(app, "#check-devices")] == ["n1", "n2"])
            await pilot.press("k")
            await until(pilot, lambda: any(j["metadata"]["name"] == job_name("dc") for j in fake.jobs()), 60)
            bad = await asyncio.to_thread(play_kubelet, fake, job_name("dc"), tmp_path)
            await until(pilot, lambda: " ago): " in shown(app, "#check-summary"), 120)
            assert "PROBLEMS" in shown(app, "#check-summary")
            assert f"n2: pod {bad} gave no result: {ECC}" in shown(app, "#check-summary")
            rows = cells(app, "#check-devices")
            assert rows[0][0] == "n1" and rows[0][7] == "OK" and float(rows[0][3]) > 0
            assert rows[1][0] == "n2" and rows[1][7] == "NO RESULT"
            assert any("n2 failing" in n for n in notes(app))
            devices = app.screen.query_one("#check-devices", DataTable)
            devices.focus()
            devices.move_cursor(row=1)
            await pilot.press("c")
            await until(pilot, lambda: fake.patches, 30)
            assert fake.patches == [("n2", "application/strategic-merge-patch+json", {"spec": {"unschedulable": True}})]
            await until(pilot, lambda: "cordoned" in cells(app, "#check-devices")[1][7])
    asyncio.run(run())
