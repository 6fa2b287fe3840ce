"""The app factory ``petstore serve`` hands granian: the one each worker process runs.

Kept apart from :mod:`petstore.cli.main` so that a worker loads neither click nor the
operator's commands, only the server.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
from pathlib import Path

from petstore.server import shutdown
from petstore.server.app import app_from_environment
from petstore.server.http.pipeline import Service

log = logging.getLogger("petstore.worker")
#: A worker collects its youngest generation after this many more allocations than
#: deallocations of tracked objects, not Python's 700: a request allocates dozens, so
#: 700 meant a collection every few requests, each walking the objects of every
#: request in flight and moving them on to older generations, whose collections walk
#: them again. Only cyclic garbage waits longer; the rest is freed, as always, with
#: its last reference.
GC_THRESHOLD = 10_000


def app() -> Service:
    """The worker's app (:func:`petstore.server.app.app_from_environment`), after the
    worker has left SIGTERM and SIGINT to the main process
    (:func:`petstore.server.shutdown.leave_stop_to_main_process`): a signal sent to
    the whole process group no longer ends a worker in the middle of the drain. Its
    youngest generation of objects is collected every :data:`GC_THRESHOLD`
    allocations. Logs the event loop granian built for the worker before calling
    this (``PETSTORE_EVENT_LOOP``)."""
    marker = os.environ.get(shutdown.DRAIN_FILE_VARIABLE)
    shutdown.leave_stop_to_main_process(Path(marker) if marker else None)
    served = app_from_environment()
    gc.set_threshold(GC_THRESHOLD)
    loop = asyncio.get_event_loop_policy().get_event_loop()
    kind = type(loop).__module__.partition(".")[0]  # uvloop, or asyncio
    log.info("worker %d serves on the %s event loop", os.getpid(), kind)
    return served
