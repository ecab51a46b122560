"""The deploy form: template, cluster, model, size (custom-training: command and directory), preset,
workers, steps, and the W&B / HF tokens in password fields. `ctrl+e` opens the full detailed config; `ctrl+r`
takes the planner's advice (its preset in the form, its H and overlap as `--set` items on top
of the form and any edited config) until a choice it was computed for changes.

Before submitting, the requirements (core.requirements) are checked; what is not met is
shown as a table and nothing is submitted. `ctrl+s` again with the same choices deploys
anyway (the CLI's --force), naming what it ignores."""

from __future__ import annotations

import dataclasses

import yaml
from textual import on, work
from textual.worker import get_current_worker
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Footer, Header, Input, Select, Static

from core.domain import recipe_catalog
from core.state.cluster_records import list_clusters
from core.errors import GeotrainError, InvalidInput
from core.domain.custom_training import CUSTOM_TRAINING
from core.domain.records import TEMPLATES
from core.domain.terminal_text import printable
from core.planner.cluster_inputs import DEFAULT_STEP_S, plan_for_cluster
from core.planner.wan_what_if import OVERLAP_LOSS
from core.planner.datacenter_inputs import DEFAULT_STEPS, choose_for_cluster
from core.requirements.check import check_before_deploy
from core.workspaces import DEFAULTS, DeployRequest, check_token
from tui.widgets.form_field import FormField
from core.schema.yaml_loader import load_yaml
from tui.messages import (AppliedPlan, DeployChoices, DetailedConfig, FormProblem, PlanAdvice, RequirementsUnmet,
                          WorkspaceDeployed)
from tui.widgets.requirements_table import RequirementsTable
from tui.screens.base import GeotrainScreen


def _options(names) -> list[tuple[str, str]]:
    return [(name, name) for name in names]


class DeployScreen(GeotrainScreen):
    TITLE = "Deploy a workspace"
    AUTO_FOCUS = "#cluster"
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+s", "deploy", "Deploy", priority=True),
        Binding("ctrl+e", "edit_config", "Detailed config", priority=True),
        Binding("ctrl+r", "use_plan", "Use plan", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.models: dict[str, list[str]] = {}
        self.presets: list[str] = []
        self.config_text: str | None = None  # set once the detailed config was edited and saved
        self.preferred_size = DEFAULTS["size"]
        self.unmet: RequirementsUnmet | None = None  # shown; the same choices again = go on anyway
        self.plan = None  # the planner's Plan for the form's current choices (ctrl+r applies it)
        self.plan_key: tuple = ()  # the choices that plan is for
        self.no_plan = ""  # why the planner has no estimate for them, when it said so
        self.applied: AppliedPlan | None = None  # what ctrl+r applied: --set items on top of the form
        self.editor_diloco: tuple = ()  # (inner_steps, overlap) as the editor showed them

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(classes="form"):
            with Horizontal(classes="row"):
                yield FormField("Template", Select(_options(TEMPLATES), value=TEMPLATES[0],
                                                allow_blank=False, id="template"))
                yield FormField("Cluster", Select([], id="cluster"))
            with Horizontal(classes="row"):
                yield FormField("Model", Select([], id="model"))
                yield FormField("Size", Select([], id="size"))
                yield FormField("Gradient compression", Select([], id="preset"))
            with Horizontal(classes="row", id="custom-row"):  # custom-training only
                yield FormField("Command (split into words, never run by a shell)",
                                Input(placeholder="python train.py --epochs 1", id="command"))
                yield FormField("Working directory", Input(placeholder="where train.py is", id="workdir"))
            with Horizontal(classes="row"):
                yield FormField("Workers", Input(str(DEFAULTS["workers"]), type="integer", id="workers"))
                yield FormField("Steps", Input(str(DEFAULTS["steps"]), type="integer", id="steps"))
            with Horizontal(classes="row"):
                yield FormField("W&B API key (optional; runs offline without)",
                             Input(password=True, placeholder="never shown", id="wandb"))
                yield FormField("Hugging Face token (optional; checkpoints stay local)",
                             Input(password=True, placeholder="never shown", id="hf"))
            yield Static("", id="plan", classes="hint", markup=False)
            yield Static("", id="config-state", classes="hint", markup=False)
            yield Static("", id="form-error", classes="field-error", markup=False)
            yield RequirementsTable(id="requirements")
            with Horizontal(classes="form-buttons"):
                yield Button("Deploy", id="deploy", variant="primary")
                yield Button("Detailed config…", id="edit")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#custom-row").display = False
        self._load_choices()

    @on(Select.Changed, "#template")
    def _template_changed(self, event: Select.Changed) -> None:
        """custom-training: your command and directory (model and size are your script's own: not shown)."""
        custom = event.value == CUSTOM_TRAINING
        self.query_one("#custom-row").display = custom
        for field in ("#model", "#size"):
            self.query_one(field).parent.display = not custom

    @work(thread=True, exclusive=True, exit_on_error=False, group="choices", name="Loading choices")
    def _load_choices(self) -> None:
        store = self.app.service.store
        self.post_message(DeployChoices([c.name for c in list_clusters(store)],
                                        recipe_catalog.models(), list(recipe_catalog.presets())))

    @on(DeployChoices)
    def _choices(self, message: DeployChoices) -> None:
        self.models, self.presets = message.models, message.presets
        self._set_options("#cluster", message.clusters, "local")
        self._set_options("#model", list(message.models), DEFAULTS["model"])
        self._set_options("#preset", message.presets, DEFAULTS["preset"])
        self._sizes(DEFAULTS["model"])

    def _set_options(self, selector: str, names: list[str], default: str) -> None:
        select = self.query_one(selector, Select)
        select.set_options(_options(names))
        if default in names:
            select.value = default
        elif names:
            select.value = names[0]

    def _sizes(self, model: str) -> None:
        sizes = self.models.get(model, [])
        self._set_options("#size", sizes, self.preferred_size)

    @on(Select.Changed, "#model")
    def _model_changed(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            self._sizes(event.value)

    _KEY_NAMES = ("cluster", "model", "size", "workers")

    def _plan_key(self) -> tuple:
        """The choices a plan depends on: cluster, model, size and workers (not the preset or steps)."""
        workers = self.query_one("#workers", Input).value.strip()
        return (self._value("#cluster"), self._value("#model"), self._value("#size"),
                str(int(workers)) if workers.isdigit() else workers)

    @on(Select.Changed, "#cluster, #model, #size")
    @on(Input.Changed, "#workers, #steps")
    def _choices_changed(self) -> None:
        key = self._plan_key()
        if self.plan_key != key:  # until the planner has seen these choices, ctrl+r has nothing to apply
            self.plan, self.no_plan = None, ""
            self.query_one("#plan", Static).update("Planner: working out these choices…")
        if self.applied is not None and self.applied.key != key:
            changed = [name for name, old, new in zip(self._KEY_NAMES, self.applied.key, key) if old != new]
            self._drop_applied(f"the {' and '.join(changed)} changed")
        cluster, model, size, workers = key
        steps = self.query_one("#steps", Input).value.strip()
        if cluster and model and size and workers.isdigit() and int(workers) > 0:
            self._advise(cluster, model, size, int(workers), int(steps) if steps.isdigit() and int(steps) else None)
        elif cluster and model and size:
            self.query_one("#plan", Static).update("Planner: waiting for a number of workers (1 or more)")

    @on(Select.Changed, "#preset")
    def _preset_changed(self, event: Select.Changed) -> None:
        if self.applied is not None and event.value != self.applied.preset:
            self._drop_applied(f"the preset is now {event.value}")

    def _drop_applied(self, why: str) -> None:
        self.applied = None
        self.query_one("#config-state", Static).update(
            f"The planner's advice is no longer applied: {why}. ctrl+r applies the advice shown now.")

    @work(thread=True, exclusive=True, exit_on_error=False, group="plan", name="Planning")
    def _advise(self, cluster: str, model: str, size: str, workers: int, steps: int | None = None) -> None:
        """The WAN planner's pick for these choices (step time assumed unless measured), and
        on a cluster in several datacenters, which of them to use."""
        plan, no_plan = None, ""
        try:
            plan = plan_for_cluster(self.app.service.store, cluster, model, size, workers=workers)
            cost = f"; overlapped runs ended {OVERLAP_LOSS} higher in loss at equal steps" if plan.overlap else ""
            text = f"Planner: {plan.summary()} on {cluster}, {workers} workers ({size}){cost}; ctrl+r uses it"
        except GeotrainError as exc:
            no_plan = exc.message
            text = f"Planner: no estimate ({exc.message})"
        except Exception as exc:  # noqa: BLE001 - the form says so instead of waiting for ever
            no_plan = f"the planner failed: {type(exc).__name__}: {exc}"
            text = f"Planner: no estimate ({no_plan})"
        try:
            sites = choose_for_cluster(self.app.service.store, cluster, model, size,
                                       steps=steps or DEFAULT_STEPS)
            if sites:
                text += f"\nDatacenters: {sites.reason()} ({steps or DEFAULT_STEPS} steps, " \
                        f"{DEFAULT_STEP_S:g} s/step assumed)"
        except GeotrainError as exc:
            text += f"\nDatacenters: no choice ({exc.message})"
        if not get_current_worker().is_cancelled:  # superseded by newer choices: say nothing
            self.post_message(PlanAdvice(text, plan, (cluster, model, size, str(workers)), no_plan))

    @on(PlanAdvice)
    def _show_advice(self, message: PlanAdvice) -> None:
        if message.key != self._plan_key():
            return  # advice for choices the form no longer has
        self.plan, self.plan_key, self.no_plan = message.plan, message.key, message.no_plan
        self.query_one("#plan", Static).update(message.text)

    # reading the form ------------------------------------------------------
    def _value(self, selector: str) -> str | None:
        value = self.query_one(selector, Select).value
        return value if isinstance(value, str) else None

    def _number(self, selector: str, label: str) -> int:
        text = self.query_one(selector, Input).value.strip()
        try:
            return int(text)
        except ValueError:
            raise InvalidInput(f"{label} must be a whole number, got {text!r}",
                               f"type a number of {label.lower()} (1 or more)") from None

    def request(self) -> DeployRequest:
        """The form as a DeployRequest; raises InvalidInput for what it can see itself."""
        custom = self._value("#template") == CUSTOM_TRAINING
        common = dict(cluster=self._value("#cluster") or "local", preset=self._value("#preset"),
                      workers=self._number("#workers", "Workers"), steps=self._number("#steps", "Steps"))
        if custom:
            return DeployRequest(**common, template=CUSTOM_TRAINING, command=self.query_one("#command", Input).value,
                                 workdir=self.query_one("#workdir", Input).value.strip() or None)
        return DeployRequest(**common, model=self._value("#model"), size=self._value("#size"),
                             config_text=self.config_text, config_source="detailed config",
                             sets=self.applied.sets if self.applied else ())

    def tokens(self) -> dict[str, str | None]:
        tokens = {}
        for name in ("wandb", "hf"):
            value = self.query_one(f"#{name}", Input).value
            if value:
                check_token(name, value)
            tokens[name] = value or None
        return tokens

    # actions ---------------------------------------------------------------
    @on(Button.Pressed, "#deploy")
    def action_deploy(self) -> None:
        self._problem("")
        try:
            request, tokens = self.request(), self.tokens()
        except InvalidInput as exc:
            self._problem(str(exc))
            return
        unmet = self.unmet
        force = unmet is not None and unmet.request == request and unmet.tokens == tokens
        self._show_requirements(None)
        self._deploy(request, tokens, force)

    @work(thread=True, exclusive=True, exit_on_error=False, group="deploy", name="Deploy")
    def _deploy(self, request: DeployRequest, tokens: dict, force: bool = False) -> None:
        service = self.app.service
        try:
            spec = service.build_spec(request)
            report = None if force else check_before_deploy(service.store, spec, tokens)
        except GeotrainError as exc:
            self.post_message(FormProblem(str(exc)))
            return
        if report is not None and not report.ok:
            self.post_message(RequirementsUnmet(report, request, tokens))
            return
        self.post_message(WorkspaceDeployed(service.deploy(spec, tokens)))

    @on(RequirementsUnmet)
    def _requirements_unmet(self, message: RequirementsUnmet) -> None:
        self._show_requirements(message)
        self._problem(f"{message.report.summary()}. Fix them, or press ctrl+s again to deploy anyway, "
                      f"ignoring {message.report.ignoring_briefly()}.")

    def _show_requirements(self, unmet: RequirementsUnmet | None) -> None:
        self.unmet = unmet
        self.query_one(RequirementsTable).show(unmet.report if unmet else None)

    @on(FormProblem)
    def _show_problem(self, message: FormProblem) -> None:
        self._problem(message.text)

    def _problem(self, text: str) -> None:
        self.query_one("#form-error", Static).update(text and f"✗ {printable(text)}")  # a server's words, often

    @on(WorkspaceDeployed)
    def _deployed(self, message: WorkspaceDeployed) -> None:
        self.notify(f"Deployed {message.workspace.id}", markup=False)
        self.app.open_workspace(message.workspace.id, replace=True)

    def action_use_plan(self) -> None:
        """The planner's preset in the form, and its H and overlap choice as `--set` items on top
        of the form and any edited config; checked (in this handler, so ctrl+s or ctrl+e right
        after see it) before anything in the form changes."""
        self._problem("")
        plan = self.plan
        if plan is None or plan.recommended is None or self.plan_key != self._plan_key():
            why = (f"the planner has no estimate for these choices ({self.no_plan})"
                   if self.no_plan and self.plan_key == self._plan_key()
                   else "no planner advice yet for these choices: wait for the Planner line, then press ctrl+r")
            self._problem(why)
            return
        if plan.recommended not in self.presets:
            self._problem(f"the planner recommends preset {plan.recommended!r}, which this form does not offer")
            return
        sets = (f"diloco.inner_steps={plan.inner_steps if plan.tuned() else 'null'}",
                f"diloco.overlap={'true' if plan.overlap else 'false'}")
        what = (f"preset {plan.recommended}, " + (f"H={plan.inner_steps}" if plan.tuned() else "the preset's own H")
                + f", overlap {'on' if plan.overlap else 'off'}")
        try:
            request = dataclasses.replace(self.request(), preset=plan.recommended, sets=sets)
            self.app.service.build_spec(request)  # the form with the advice must make a valid workspace
        except GeotrainError as exc:
            self._problem(str(exc))
            return
        except Exception as exc:  # noqa: BLE001 - one line in the form, never a traceback
            self._problem(f"could not apply the planner's advice: {type(exc).__name__}: {exc}")
            return
        self.applied = AppliedPlan(self.plan_key, plan.recommended, sets, what)
        self.query_one("#preset", Select).value = plan.recommended
        where = "on top of your edited detailed config" if self.config_text else "when you deploy"
        self.query_one("#config-state", Static).update(
            f"Using the planner's advice ({what}) {where}; changing cluster, model, size, workers or preset "
            "drops it.")

    @on(Button.Pressed, "#edit")
    def action_edit_config(self) -> None:
        self._problem("")
        try:
            request = self.request()
        except InvalidInput as exc:
            self._problem(str(exc))
            return
        # the advice stays --set items on top (so a later change of choices can drop it); the
        # editor names them in a comment instead of writing them into the user's config
        self._build_config(dataclasses.replace(request, sets=()), self.applied)

    @work(thread=True, exclusive=True, exit_on_error=False, group="config", name="Building config")
    def _build_config(self, request: DeployRequest, applied: AppliedPlan | None) -> None:
        try:
            spec = self.app.service.build_spec(request)
        except GeotrainError as exc:
            self.post_message(FormProblem(str(exc)))
            return
        text = yaml.safe_dump(spec.config, sort_keys=False)
        if applied is not None:
            text = (f"# The planner's advice (ctrl+r) is applied on top when you deploy: {', '.join(applied.sets)}.\n"
                    "# Set diloco.inner_steps or diloco.overlap here to use your own instead.\n" + text)
        if not get_current_worker().is_cancelled:
            self.post_message(DetailedConfig(text, self._diloco(spec.config)))

    @on(DetailedConfig)
    def _open_editor(self, message: DetailedConfig) -> None:
        self.editor_diloco = message.diloco
        self.app.open_config_editor(message.text, self._edited)

    @staticmethod
    def _diloco(config: dict) -> tuple:
        """A config's (inner_steps, overlap): what the planner's advice sets."""
        diloco = config.get("diloco") or {}
        return (diloco.get("inner_steps"), diloco.get("overlap")) if isinstance(diloco, dict) else ()

    def _edited(self, text: str | None) -> None:
        if text is None:
            return
        self.config_text = text
        config = load_yaml(text, "the detailed config")
        state = "Using your edited detailed config (form fields still apply on top)."
        if self.applied is not None and self._diloco(config) != self.editor_diloco:
            self.applied = None  # the user set H or overlap in the editor: theirs, not the advice, deploys
            state = "Using your edited detailed config: your diloco.inner_steps/overlap replace the planner's advice."
        elif self.applied is not None:
            state = f"Using your edited detailed config with the planner's advice ({self.applied.what}) on top."
        self.query_one("#config-state", Static).update(state)
        if isinstance(config.get("size"), str):
            self.preferred_size = config["size"]
            self._sizes(config.get("model") or self._value("#model") or "")
        for key, selector in (("model", "#model"), ("gradient_compression", "#preset")):
            if isinstance(config.get(key), str):
                self.query_one(selector, Select).value = config[key]
        if isinstance(config.get("steps"), int):
            self.query_one("#steps", Input).value = str(config["steps"])

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.app.pop_screen()
