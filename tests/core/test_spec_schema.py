"""The workspace spec and its recovery settings as typed models: the first problem as one
line naming the field, what was expected, what was found and what to do."""

from __future__ import annotations

import pytest

import dataclasses

from core.domain.records import WorkspaceSpec
from core.domain.recovery import RecoverySettings
from core.domain.spec_schema import WorkspaceSpecSchema
from core.errors import FieldError

BASE = dict(cluster="local", model="gpt-neo", size="tiny", preset="medium", workers=2, steps=5)


@pytest.mark.parametrize("change, said", [
    ({"workers": 0}, "workers: expected an integer ≥ 1, found 0 — use --workers 1 or more"),
    ({"zzz": 1, "aaa": 2}, "aaa: expected one of cluster, model, size, preset, workers, steps, template, "
                           "config, tokens, image, recovery, command, workdir, found 'an unknown field' — remove or rename the field"),
    ({"model": None}, "model: expected a string, found None — set `model` in the spec"),
    ({"workers": True}, "workers: expected an integer, found True — use --workers 1 or more"),
    ({"template": "x"}, "template: expected one of 'distributed-training', 'custom-training', found 'x'"),
    ({"tokens": {"wandb": 5}}, "tokens.wandb: expected a valid string, found 5"),
    ({"config": [1]}, "config: expected a mapping, found [1] — the detailed config is a mapping"),
    ({"recovery": {"pvc": "a", "host_path": "/b"}},
     "recovery.pvc: expected either host_path or pvc, found 'both' — keep one of recovery.host_path and recovery.pvc"),
    ({"recovery": {"join_timeout_s": "5"}},
     "recovery.join_timeout_s: expected seconds, more than 0 and at most 86400, found '5' — e.g. join_timeout_s: 60"),
    ({"recovery": {"checkpoint_dir": "ckpt"}},
     "recovery.checkpoint_dir: expected an absolute path, found 'ckpt' — start the path with /"),
    ({"recovery": {"hf_repo": " "}}, "recovery.hf_repo: expected an HF Hub repo id (name or namespace/name: letters, "
                                     "digits, '.', '_', '-'), found ' ' — e.g. hf_repo: me/run-ckpts, or remove it"),
    ({"recovery": {"hf_repo": "me/ok\ngeotrain-event {}"}},  # never a second line in a log or event stream
     "recovery.hf_repo: expected an HF Hub repo id (name or namespace/name: letters, digits, '.', '_', '-'), "
     "found 'me/ok\\ngeotrain-event {}' — e.g. hf_repo: me/run-ckpts, or remove it"),
    ({"recovery": [1]}, "recovery: expected a mapping, found [1] — write e.g. `recovery: {max_recoveries: 3}`"),
])
def test_first_problem_is_one_line_naming_the_field(change, said):
    with pytest.raises(FieldError) as err:
        WorkspaceSpec.from_dict({**BASE, **change})
    assert str(err.value) == said
    assert "\n" not in str(err.value)


def test_missing_steps_and_not_a_mapping():
    data = {k: v for k, v in BASE.items() if k != "steps"}
    with pytest.raises(FieldError, match=r"^steps: expected an integer ≥ 1, found None — set `steps` in the spec$"):
        WorkspaceSpec.from_dict(data)
    with pytest.raises(FieldError, match="a workspace spec is a YAML mapping"):
        WorkspaceSpec.from_dict(["model: gpt-neo"])
    with pytest.raises(FieldError, match=r"^recovery: expected a mapping of recovery settings, found 'list'"):
        RecoverySettings.from_dict([1])


def test_nulls_take_defaults_and_recovery_is_normalised():
    spec = WorkspaceSpec.from_dict({**BASE, "image": None, "config": None, "recovery": {"max_recoveries": 0}})
    assert spec.image is None and spec.config == {}
    assert spec.recovery == RecoverySettings(max_recoveries=0).to_dict()
    assert spec.recovery["join_timeout_s"] == 60.0 and "pvc" not in spec.recovery
    assert WorkspaceSpec.from_dict(spec.to_dict()) == spec  # what the store keeps reads back the same


def test_field_docs_reach_the_json_schema():
    schema = WorkspaceSpecSchema.model_json_schema()
    assert schema["properties"]["workers"]["minimum"] == 1
    assert "secret store" in schema["properties"]["tokens"]["description"]
    assert RecoverySettings.model_json_schema()["properties"]["pvc"]["description"].startswith("Kubernetes")


def test_the_plain_spec_and_its_checking_model_have_the_same_fields_and_defaults():
    """WorkspaceSpec (read back from the store without pydantic) and the model that checks it
    (core.domain.spec_schema) are written twice: a field added to one must be added to both."""
    plain = {f.name: (f.default if f.default is not dataclasses.MISSING else
                      f.default_factory() if f.default_factory is not dataclasses.MISSING else "(required)")
             for f in dataclasses.fields(WorkspaceSpec)}
    typed = {name: "(required)" if info.is_required() else info.get_default(call_default_factory=True)
             for name, info in WorkspaceSpecSchema.model_fields.items()}
    assert plain == typed
    spec = WorkspaceSpec.from_dict(BASE)
    assert type(spec) is WorkspaceSpec and spec == WorkspaceSpec(**spec.to_dict())
