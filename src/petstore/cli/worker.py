"""The app factory ``petstore serve`` hands granian: the one each worker process runs.

Kept apart from :mod:`petstore.cli.main` so that a worker loads neither click nor the
operator's commands, only the server.
"""

from __future__ import annotations

import os
from pathlib import Path

from petstore.server import shutdown
from petstore.server.app import app_from_environment
from petstore.server.http.pipeline import Service


def app() -> Service:
    """The worker's app (:func:`petstore.server.app.app_from_environment`), after the
    worker has left SIGTERM and SIGINT to the main process
    (:func:`petstore.server.shutdown.leave_stop_to_main_process`): a signal sent to
    the whole process group no longer ends a worker in the middle of the drain."""
    marker = os.environ.get(shutdown.DRAIN_FILE_VARIABLE)
    shutdown.leave_stop_to_main_process(Path(marker) if marker else None)
    return app_from_environment()
