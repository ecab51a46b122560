"""The deploy form: template, cluster, model, size, preset, workers, steps, and the
W&B / HF tokens in password fields. `ctrl+e` opens the full detailed config; `ctrl+r`
takes the planner's advice (its preset, and its H and overlap into the detailed config).

Before submitting, the requirements (core.requirements) are checked; what is not met is
shown as a table and nothing is submitted. `ctrl+s` again with the same choices deploys
anyway (the CLI's --force), naming what it ignores."""

from __future__ import annotations

import yaml
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Footer, Header, Input, Select, Static

from core.domain import recipe_catalog
from core.state.cluster_records import list_clusters
from core.errors import GeotrainError, InvalidInput
from core.domain.records import TEMPLATES
from core.planner.cluster_inputs import DEFAULT_STEP_S, plan_for_cluster
from core.planner.datacenter_inputs import DEFAULT_STEPS, choose_for_cluster
from core.requirements.check import check_before_deploy
from core.workspaces import DEFAULTS, DeployRequest, check_token
from tui.widgets.form_field import FormField
from core.schema.yaml_loader import load_yaml
from tui.messages import (DeployChoices, DetailedConfig, FormProblem, PlanAdvice, PlanApplied,
                          RequirementsUnmet, WorkspaceDeployed)
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
        self.config_text: str | None = None  # set once the detailed config was edited
        self.preferred_size = DEFAULTS["size"]
        self.unmet: RequirementsUnmet | None = None  # shown; the same choices again = go on anyway
        self.plan = None  # the planner's latest Plan for the form's choices (ctrl+r applies it)

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
            with Horizontal(classes="row"):
                yield FormField("Workers", Input(str(DEFAULTS["workers"]), type="integer", id="workers"))
                yield FormField("Steps", Input(str(DEFAULTS["steps"]), type="integer", id="steps"))
            with Horizontal(classes="row"):
                yield FormField("W&B API key (optional; runs offline without)",
                             Input(password=True, placeholder="never shown", id="wandb"))
                yield FormField("Hugging Face token (optional; checkpoints stay local)",
                             Input(password=True, placeholder="never shown", id="hf"))
            yield Static("", id="plan", classes="hint", markup=False)
            yield Static("", id="config-state", classes="hint")
            yield Static("", id="form-error", classes="field-error", markup=False)
            yield RequirementsTable(id="requirements")
            with Horizontal(classes="form-buttons"):
                yield Button("Deploy", id="deploy", variant="primary")
                yield Button("Detailed config…", id="edit")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def on_mount(self) -> None:
        self._load_choices()

    @work(thread=True, exclusive=True, exit_on_error=False, group="choices", name="Loading choices")
    def _load_choices(self) -> None:
        store = self.app.service.store
        self.post_message(DeployChoices([c.name for c in list_clusters(store)],
                                        recipe_catalog.models(), list(recipe_catalog.presets())))

    @on(DeployChoices)
    def _choices(self, message: DeployChoices) -> None:
        self.models = message.models
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

    @on(Select.Changed, "#cluster, #size, #preset")
    @on(Input.Changed, "#workers, #steps")
    def _choices_changed(self) -> None:
        self.plan = None  # until the planner has seen these choices, ctrl+r has nothing to apply
        cluster, model, size = self._value("#cluster"), self._value("#model"), self._value("#size")
        workers = self.query_one("#workers", Input).value.strip()
        steps = self.query_one("#steps", Input).value.strip()
        if cluster and model and size and workers.isdigit() and int(workers) > 0:
            self._advise(cluster, model, size, int(workers), int(steps) if steps.isdigit() and int(steps) else None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="plan", name="Planning")
    def _advise(self, cluster: str, model: str, size: str, workers: int, steps: int | None = None) -> None:
        """The WAN planner's pick for these choices (step time assumed unless measured), and
        on a cluster in several datacenters, which of them to use."""
        plan = None
        try:
            plan = plan_for_cluster(self.app.service.store, cluster, model, size, workers=workers)
            text = f"Planner: {plan.summary()} on {cluster}, {workers} workers ({size}); ctrl+r uses it"
        except GeotrainError as exc:
            text = f"Planner: no estimate ({exc.message})"
        try:
            sites = choose_for_cluster(self.app.service.store, cluster, model, size,
                                       steps=steps or DEFAULT_STEPS)
            if sites:
                text += f"\nDatacenters: {sites.reason()} ({steps or DEFAULT_STEPS} steps, " \
                        f"{DEFAULT_STEP_S:g} s/step assumed)"
        except GeotrainError as exc:
            text += f"\nDatacenters: no choice ({exc.message})"
        self.post_message(PlanAdvice(text, plan))

    @on(PlanAdvice)
    def _show_advice(self, message: PlanAdvice) -> None:
        self.plan = message.plan
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
        return DeployRequest(cluster=self._value("#cluster") or "local",
                             model=self._value("#model"), size=self._value("#size"),
                             preset=self._value("#preset"),
                             workers=self._number("#workers", "Workers"),
                             steps=self._number("#steps", "Steps"),
                             config_text=self.config_text, config_source="detailed config")

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
        self.query_one("#form-error", Static).update(text and f"✗ {text}")

    @on(WorkspaceDeployed)
    def _deployed(self, message: WorkspaceDeployed) -> None:
        self.notify(f"Deployed {message.workspace.id}", markup=False)
        self.app.open_workspace(message.workspace.id, replace=True)

    def action_use_plan(self) -> None:
        """The planner's preset in the form; its H (when it lowered it) and overlap in the detailed config."""
        self._problem("")
        plan = self.plan
        if plan is None or plan.recommended is None:
            self._problem("no planner advice yet: choose a cluster, model, size and workers, then press ctrl+r")
            return
        self.query_one("#preset", Select).value = plan.recommended
        try:
            request = self.request()
        except InvalidInput as exc:
            self._problem(str(exc))
            return
        self._apply_plan(request, plan)

    @work(thread=True, exclusive=True, exit_on_error=False, group="config", name="Applying the plan")
    def _apply_plan(self, request: DeployRequest, plan) -> None:
        try:
            config = self.app.service.build_spec(request).config
        except GeotrainError as exc:
            self.post_message(FormProblem(str(exc)))
            return
        diloco = dict(config.get("diloco") or {})
        diloco["inner_steps"] = plan.inner_steps if plan.tuned() else None  # null: the preset's own H
        diloco["overlap"] = bool(plan.overlap)
        config = {**config, "gradient_compression": plan.recommended, "diloco": diloco}
        how = [f"preset {plan.recommended}"]
        if plan.tuned():
            how.append(f"H={plan.inner_steps}")
        if plan.overlap:
            how.append("overlap on")
        self.post_message(PlanApplied(yaml.safe_dump(config, sort_keys=False), ", ".join(how)))

    @on(PlanApplied)
    def _plan_applied(self, message: PlanApplied) -> None:
        self.config_text = message.config_text
        self.query_one("#config-state", Static).update(
            f"Using the planner's advice ({message.what}) in the detailed config: ctrl+e shows it.")

    @on(Button.Pressed, "#edit")
    def action_edit_config(self) -> None:
        self._problem("")
        try:
            request = self.request()
        except InvalidInput as exc:
            self._problem(str(exc))
            return
        self._build_config(request)

    @work(thread=True, exclusive=True, exit_on_error=False, group="config", name="Building config")
    def _build_config(self, request: DeployRequest) -> None:
        try:
            spec = self.app.service.build_spec(request)
        except InvalidInput as exc:
            self.post_message(FormProblem(str(exc)))
            return
        self.post_message(DetailedConfig(yaml.safe_dump(spec.config, sort_keys=False)))

    @on(DetailedConfig)
    def _open_editor(self, message: DetailedConfig) -> None:
        self.app.open_config_editor(message.text, self._edited)

    def _edited(self, text: str | None) -> None:
        if text is None:
            return
        self.config_text = text
        config = load_yaml(text, "the detailed config")
        if isinstance(config.get("size"), str):
            self.preferred_size = config["size"]
            self._sizes(config.get("model") or self._value("#model") or "")
        for key, selector in (("model", "#model"), ("gradient_compression", "#preset")):
            if isinstance(config.get(key), str):
                self.query_one(selector, Select).value = config[key]
        if isinstance(config.get("steps"), int):
            self.query_one("#steps", Input).value = str(config["steps"])
        self.query_one("#config-state", Static).update(
            "Using your edited detailed config (form fields still apply on top).")

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.app.pop_screen()
