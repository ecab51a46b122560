"""The wizard's options step gives what `clusters deploy --sha256 FILE=HEX` and
--insecure-skip-checksum give (52e3ef6 refuses k3s without either): the same values accepted,
the same one-line error, the same plan handed to core. Core's deploy is replaced by its real
preflight checksum judgment on the node's recorded facts, so no SSH is needed."""

import asyncio

from textual.widgets import Checkbox, Input, Static

from core.bootstrap import preflight, versions
from core.bootstrap.deploy import DeployResult, plan_config
from core.bootstrap.progress import ProgressEvent
from core.bootstrap.runner import DeploySummary, Failure
from core.bootstrap.session import CommandLog
from core.cli import main
from core.state.node_records import get_node
from tests.tui import states
from tests.tui.waiting import on_screen, until
from tui.app import make_app
from tui.screens.cluster_wizard import ClusterWizardScreen

GOOD = "AB" * 32  # the parser lowers it, as for --sha256
LIST = f"{versions.K3S_RELEASES}/{versions.K3S_VERSION.replace('+', '%2B')}/sha256sum-amd64.txt"


def _core_preflight(monkeypatch, plans: list) -> None:
    """core.bootstrap.deploy.deploy at preflight: every plan it is handed is kept, and each
    node is judged by preflight.checksum_blockers on its recorded facts (amd64, no k3s) for
    the steps the wizard says its deploy will run (`only` alone never includes k3s)."""
    def deploy(plan, only=None, store=None, on_event=None, record=True, planned=None, **_):
        plans.append(plan)
        summary = DeploySummary(["preflight"])
        for spec in plan.nodes:
            facts = get_node(store, spec.name).facts
            found = preflight.checksum_blockers(plan, facts, planned or only)
            summary.done[spec.name] = [] if found else ["preflight"]
            if found:
                summary.failures.append(Failure(spec.name, "preflight", "checks", "; ".join(found)))
            on_event(ProgressEvent(spec.name, "preflight", 1.0, "; ".join(found) or "ready",
                                   "failed" if found else "done"))
        summary.blocked = bool(summary.failures)
        return DeployResult(summary, CommandLog())
    monkeypatch.setattr("core.bootstrap.deploy.deploy", deploy)


async def _to_options(pilot) -> ClusterWizardScreen:
    await pilot.press("3")
    await on_screen(pilot, ClusterWizardScreen)
    screen = pilot.app.screen
    await until(pilot, lambda: screen.query_one("SelectionList").option_count == 2)
    await pilot.press("space", "enter")  # ams-2 (x86_64); fra-1 is blocked
    await until(pilot, lambda: screen.stage == "options")
    return screen


def _text(screen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


def _in_options(seeded, monkeypatch, steps) -> list:
    """Runs `steps(pilot, screen, plans)` from the options step, ams-2 picked; returns the
    plans handed to core."""
    plans: list = []
    _core_preflight(monkeypatch, plans)
    app = make_app(seeded[0], **states.app_options())

    async def run():
        async with app.run_test(size=(120, 40)) as pilot:
            await steps(pilot, await _to_options(pilot), plans)
    asyncio.run(run())
    return plans


async def _preflight(pilot, screen):
    await pilot.press("enter")
    await until(pilot, lambda: "preflight" in screen.outcomes)
    return screen.outcomes["preflight"]


def test_a_bad_sha256_is_the_cli_line_and_a_good_one_reaches_the_plan(seeded, monkeypatch, capsys):
    shown: list[str] = []

    async def steps(pilot, screen, plans):
        k3s = screen.query_one("#sha256-k3s", Input)
        assert k3s.parent.display and not screen.query_one("#sha256-k3s-arm64").parent.display
        images = screen.query_one("#sha256-k3s-airgap-images-amd64-tar").parent
        assert not images.display  # needed only with an air-gap bundle
        screen.query_one("#k3s-bundle", Input).value = "/some/bundle"
        await until(pilot, lambda: images.display)
        screen.query_one("#k3s-bundle", Input).value = ""
        await until(pilot, lambda: not images.display)

        assert not (await _preflight(pilot, screen)).ok  # nothing given: refused, in app words
        summary = _text(screen, "#preflight-summary")
        assert "Blocked" in summary and "fill 'sha256 of k3s'" in summary and LIST in summary
        assert "checked out of band" in summary and "Install k3s unverified" in summary
        assert "geotrain clusters deploy" not in summary
        await pilot.press("enter")
        assert screen.stage == "preflight"

        await pilot.press("escape")
        k3s.value = "abc"
        await pilot.press("enter")
        error = _text(screen, "#wizard-error")
        assert screen.stage == "options" and "is not a sha256 (64 hex digits)" in error
        assert "\n" not in error and len(plans) == 1
        shown.append(error)

        k3s.value = GOOD
        assert (await _preflight(pilot, screen)).ok
    plan = _in_options(seeded, monkeypatch, steps)[-1]
    assert plan.k3s.sha256 == {"k3s": GOOD.lower()} and not plan.k3s.insecure_skip_checksum
    assert plan_config(plan)["k3s"]["sha256"] == {"k3s": GOOD.lower()}  # kept as the CLI keeps it
    # the CLI refuses the same value in the same line (outside the app, which holds stderr)
    assert main(["clusters", "deploy", "gpu-cluster", "--nodes", "ams-2", "--sha256", "k3s=abc"]) == 2
    assert capsys.readouterr().err.strip() == "error: " + shown[0].removeprefix("✗ ")


def test_install_unverified_is_an_explicit_choice_that_reaches_the_plan(seeded, monkeypatch):
    async def steps(pilot, screen, plans):
        box = screen.query_one("#insecure-skip-checksum", Checkbox)
        warning = _text(screen, "#unverified-warning")
        assert box.value is False and "only the release's own checksum list" in warning
        box.value = True
        assert (await _preflight(pilot, screen)).ok
    (plan,) = _in_options(seeded, monkeypatch, steps)
    assert plan.k3s.insecure_skip_checksum and plan.k3s.sha256 == {}
    assert plan_config(plan)["k3s"]["insecure_skip_checksum"] is True
