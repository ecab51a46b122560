"""Rendered manifests as YAML for people (`--dry-run`, the app's plan): no token values, no
delivered source, multi-line strings as literal blocks."""

from __future__ import annotations

from typing import Any

import yaml

from core.kubernetes import recipes_delivery as delivery


def manifests_yaml(manifests: list[dict[str, Any]]) -> str:
    """YAML for people: a Secret shows its keys only, never values; the recipes ConfigMaps
    a count of their files, not the source."""
    shown = []
    for manifest in manifests:
        if manifest["kind"] == "Secret":
            manifest = {**manifest, "stringData": {k: "<hidden>" for k in manifest["stringData"]}}
        elif manifest["metadata"].get("labels", {}).get(delivery.PART_LABEL) == "recipes":
            data = manifest["data"]
            size = sum(len(v.encode()) for v in data.values())
            where = "the workspace's --workdir" if "-workdir-" in manifest["metadata"]["name"] \
                else "the installed recipes package"
            manifest = {**manifest, "data": {"<recipes source>": f"{len(data)} files, {size} bytes from {where}"}}
        shown.append(manifest)
    return yaml.dump_all(shown, Dumper=_ReadableDumper, sort_keys=False, width=100)


class _ReadableDumper(yaml.SafeDumper):
    """Multi-line strings (the pod's shell script, config.yaml) as literal blocks.

    No aliases: a dict shared by two manifests is printed twice, not as `&id001`/`*id001`."""

    def ignore_aliases(self, data) -> bool:
        return True


def _str(dumper: yaml.SafeDumper, text: str) -> yaml.Node:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_ReadableDumper.add_representer(str, _str)
