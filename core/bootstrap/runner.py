"""Runs steps across nodes in a thread pool, phase by phase, and sums up what happened.

A step is a list of phases; every phase runs on all live nodes at once and ends at a
barrier (WireGuard peers need every public key first). A node that fails drops out of
the later phases and steps, while the others carry on; the summary says who failed
where and why. A gate step (preflight) stops everything before any change is made.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from core.bootstrap.plan import DeployContext, NodeTarget, ProgressEvent
from core.bootstrap.session import StepFailed
from core.state.secret_store import redact

PhaseFn = Callable[[DeployContext, NodeTarget], "str | None"]
SelectFn = Callable[[DeployContext, list[NodeTarget]], list[NodeTarget]]


@dataclass
class Phase:
    name: str
    run: PhaseFn
    select: SelectFn | None = None  # which live nodes take part (default: all)


ProbeFn = Callable[[DeployContext, NodeTarget], "dict[str, str]"]


@dataclass
class Step:
    name: str
    phases: list[Phase]
    gate: bool = False  # a failure anywhere stops the deploy before the next step
    probe: ProbeFn | None = None  # facts gathered for all steps in one round trip


@dataclass
class Failure:
    node: str
    step: str
    phase: str
    message: str


@dataclass
class DeploySummary:
    steps: list[str]
    done: dict[str, list[str]] = field(default_factory=dict)  # node -> steps finished
    failures: list[Failure] = field(default_factory=list)
    blocked: bool = False  # the gate step failed; nothing was changed

    @property
    def ok(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        out = []
        for node, steps in self.done.items():
            failed = next((f for f in self.failures if f.node == node), None)
            if failed:
                out.append(f"{node}: FAILED at {failed.step} ({failed.phase}): {failed.message}")
            else:
                out.append(f"{node}: ok ({', '.join(steps) or 'nothing to do'})")
        if self.blocked:
            out.append("nothing was changed: fix the blockers above and run the deploy again")
        return out


def _phase_nodes(ctx: DeployContext, phase: Phase, alive: list[NodeTarget]) -> list[NodeTarget]:
    return phase.select(ctx, alive) if phase.select else list(alive)


def _run_one(ctx: DeployContext, step: Step, phase: Phase, index: int,
             target: NodeTarget) -> str | None:
    """Run one phase on one node; returns an error message or None."""
    target.session.step = step.name
    ctx.emit(ProgressEvent(target.name, step.name, index / len(step.phases), phase.name))
    try:
        message = phase.run(ctx, target)
    except StepFailed as exc:
        return str(exc)
    except Exception as exc:  # SSH drops, timeouts: the node fails, the others go on
        return f"{type(exc).__name__}: {exc}"
    if message:
        target.session.note(message)
        ctx.emit(ProgressEvent(target.name, step.name, (index + 1) / len(step.phases), message))
    return None


def _probe_all(steps: list[Step]) -> PhaseFn:
    """The facts of every step on one node, in one round trip, into `target.probed`."""
    def probe(ctx: DeployContext, target: NodeTarget) -> None:
        commands: dict[str, str] = {}
        for step in steps:
            if step.probe:
                commands.update(step.probe(ctx, target))
        target.probed = target.session.probe(commands)
    return probe


def run_steps(ctx: DeployContext, steps: list[Step]) -> DeploySummary:
    targets = list(ctx.targets.values())
    summary = DeploySummary([s.name for s in steps], {t.name: [] for t in targets})
    alive = list(targets)
    secrets = list(ctx.secrets.values())
    if steps and any(s.probe for s in steps):
        first = steps[0]
        steps = [Step(first.name, [Phase("facts", _probe_all(steps))] + first.phases,
                      first.gate, first.probe)] + steps[1:]
    with ThreadPoolExecutor(max_workers=max(1, len(targets))) as pool:
        for step in steps:
            in_step = list(alive)
            for index, phase in enumerate(step.phases):
                chosen = _phase_nodes(ctx, phase, alive)
                errors = pool.map(lambda t: _run_one(ctx, step, phase, index, t), chosen)
                for target, error in zip(chosen, list(errors)):
                    if error is None:
                        continue
                    error = redact(error, secrets)
                    summary.failures.append(Failure(target.name, step.name, phase.name, error))
                    target.session.note(f"FAILED in {phase.name}: {error}")
                    ctx.emit(ProgressEvent(target.name, step.name, 1.0, error, "failed"))
                    alive.remove(target)
            for target in in_step:
                if target in alive:
                    summary.done[target.name].append(step.name)
                    ctx.emit(ProgressEvent(target.name, step.name, 1.0, "done", "done"))
            if step.gate and len(alive) < len(in_step):
                summary.blocked = True
                break
    return summary
