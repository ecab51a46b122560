"""The recipes modules `clusters check` runs on a cluster's nodes (recipes.cluster_check and what it
imports: the authenticated store recipes.elastic_store and its torch client), read through the one
bounded loader (core.domain.source_files.read_shipped). Over SSH they travel on stdin
(core.bootstrap.stdin_modules); in the Volcano check job, in one ConfigMap (core.kubernetes.check_job)."""

from __future__ import annotations

from core.domain.recipe_catalog import package_root
from core.domain.source_files import read_shipped

MODULES = ("recipes", "recipes.cluster_check", "recipes.private_store", "recipes.elastic_store",
           "recipes.elastic_store_wire", "recipes.elastic_quorum", "recipes.elastic_store_client", "recipes.telemetry")


def module_path(name: str) -> str:
    """The module's file relative to the package root, e.g. recipes/cluster_check.py."""
    parts = name.split(".")
    return "/".join(parts) + "/__init__.py" if name == "recipes" else "/".join(parts) + ".py"


def module_sources() -> dict[str, str]:
    root = package_root()
    return {name: read_shipped(root / module_path(name), "reinstall geotrain: its recipes package is damaged")
            for name in MODULES}
