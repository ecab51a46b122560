"""geotrain's DiLoCo for your own model and training loop (recipes/README.md "Your own loop").

    import geotrain_loop
    loop = geotrain_loop.Loop(model, optimizer, "medium", steps=1000)   # after each backward: loop.step()

Importable whatever `recipes`, `core` or `tui` package your project has: this package loads
geotrain's recipes under a private name (geotrain_loop._private_recipes).
"""

from __future__ import annotations

from geotrain_loop.loop import Loop, LoopConfigError, join

__all__ = ["GeotrainCallback", "Loop", "LoopConfigError", "huggingface", "join", "presets"]


def __getattr__(name: str):
    """The Hugging Face callback loads transformers only when asked for."""
    if name in ("GeotrainCallback", "huggingface"):
        from geotrain_loop import hf

        return getattr(hf, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def presets() -> list[str]:
    """The preset names (recipes/presets.yaml), in the table's order."""
    from geotrain_loop._private_recipes import load

    return list(load("config").load_presets())
