"""Waiting in Pilot tests for things that happen in thread workers."""

from __future__ import annotations


async def until(pilot, predicate, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if predicate():
            return
        await pilot.pause(0.05)
    raise AssertionError("condition not reached in time")


async def on_screen(pilot, screen_type, timeout: float = 10.0) -> None:
    """Until `screen_type` is the active screen and has composed its widgets."""
    app = pilot.app
    await until(pilot, lambda: isinstance(app.screen, screen_type) and app.screen.is_mounted
                and len(app.screen.children) > 0, timeout)
    await pilot.pause()
