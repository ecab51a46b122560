"""Reading what a person wrote: files and YAML through one loader, typed checks with
one-line errors (pydantic ValidationError -> FieldError), the detailed training config
checked in-process with its YAML lines, field docs and JSON Schema.

Imports only core.errors and recipes.schema (the torch-free typed config shared with
the recipes)."""
