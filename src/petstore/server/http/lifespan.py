"""The ASGI lifespan protocol (:func:`run_lifespan`): what the app opens at startup
and closes at shutdown."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack

from starlette.types import Receive, Send


async def run_lifespan(
    lifespan: Callable[[], AbstractAsyncContextManager[None]], receive: Receive, send: Send
) -> None:
    """Enter ``lifespan()`` at ``lifespan.startup`` and leave it at
    ``lifespan.shutdown``; a startup or shutdown that fails is reported with its
    traceback and raised again, as Starlette does."""
    async with AsyncExitStack() as stack:
        await receive()  # lifespan.startup
        try:
            await stack.enter_async_context(lifespan())
        except BaseException:
            await send({"type": "lifespan.startup.failed", "message": traceback.format_exc()})
            raise
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        try:
            await stack.aclose()
        except BaseException:
            await send({"type": "lifespan.shutdown.failed", "message": traceback.format_exc()})
            raise
    await send({"type": "lifespan.shutdown.complete"})
