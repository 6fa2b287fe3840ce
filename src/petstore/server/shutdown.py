"""Graceful shutdown of ``petstore serve``: take the instance out of the load balancer,
then stop it, within a deadline (issue: a rolling restart behind HAProxy fails no
request).

On SIGTERM, in the server's main process:

1. at once, every worker's ``/readyz`` answers 503 ``unavailable`` while every other
   request is served as before: the load balancer, which checks ``/readyz`` (HAProxy:
   every second, out after 2 failures), stops sending new requests here;
2. ``PETSTORE_SHUTDOWN_DRAIN_SECONDS`` later, granian's own stop starts: it closes the
   listening socket and sends SIGTERM to each worker, which finishes the requests in
   flight, closes idle keep-alive connections and runs the ASGI lifespan shutdown
   (log lines flushed, connections closed);
3. a worker still running ``PETSTORE_SHUTDOWN_TIMEOUT_SECONDS`` after the SIGTERM is
   killed (granian's ``workers_kill_timeout``), so the process exits by then.

SIGINT (Ctrl-C at a terminal) stops at once, gracefully, with no drain; a second
SIGTERM, or a SIGINT, during the drain cuts it short.

The stop is the main process's alone. A signal sent to the whole process group
(``kill -TERM -PGID``, ``timeout``, a terminal's Ctrl-C) or to every process of a
systemd unit (its default ``KillMode=control-group``) reaches the workers too, and a
worker that stopped on it would cut the drain short (granian: "Unexpected exit from
worker-1", exit 1). So a worker blocks SIGTERM and SIGINT from its start
(:func:`leave_stop_to_main_process`) and one thread of it takes them with
``sigwaitinfo``: a signal sent by the main process (granian's stop, after the drain),
or any once the main process is gone, is sent on to granian's own handler; any other
is logged and left to the main process, which got it too. Two SIGTERMs pending at
once merge into one that names the first sender, so the main process marks its stop
in a file (:func:`stop_marker`) before it signals the workers: a worker obeys any
sender once that file exists.

The workers are processes that granian starts; they learn of the drain from a
marker file. :func:`drain_marker` picks its path in a private temporary directory
and hands it to the workers in ``PETSTORE_INTERNAL_DRAIN_FILE`` (internal: set by
``serve``, not a setting); :class:`Drain` creates the file; ``/readyz`` asks whether
it exists, one ``stat`` per health check, and no other request looks.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

from petstore.server.config import Settings
from petstore.server.telemetry import logs

#: The environment variable that carries the marker file's path to the workers.
DRAIN_FILE_VARIABLE = "PETSTORE_INTERNAL_DRAIN_FILE"

log = logging.getLogger("petstore.shutdown")

SignalHandler = Callable[[int, FrameType | None], object]


def stop_marker(marker: Path) -> Path:
    """The file, beside the drain marker ``marker``, that exists once the main
    process has started its stop (after the drain, or at once)."""
    return marker.with_name("stopping")


def leave_stop_to_main_process(marker: Path | None) -> threading.Thread:
    """In a worker, before it starts any thread: block SIGTERM and SIGINT in this
    thread (and so in every thread started from now on) and start the daemon thread
    that takes them. A signal from the parent process (the main process of
    ``serve``), or any signal once the parent has exited, is sent again to this
    process, unblocked in that thread alone, so that granian's handler stops the
    worker gracefully; the thread then ends. So is any signal once the stop marker of
    the drain marker ``marker`` exists (:func:`stop_marker`). Any other sender's
    signal is logged and dropped. Returns the thread (already started)."""
    stop_signals = {signal.SIGTERM, signal.SIGINT}
    signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    for signum in stop_signals:  # the main process's handlers, inherited: useless here
        signal.signal(signum, signal.SIG_DFL)  # until granian's: a stop while starting ends it
    parent = os.getppid()

    def stopping() -> bool:
        return marker is not None and stop_marker(marker).exists()

    def take_signals() -> None:
        while True:
            info = signal.sigwaitinfo(stop_signals)
            if info.si_pid == parent or os.getppid() != parent or stopping():
                break
            log.info(
                "%s from process %d: left to the main process, which drains and then "
                "stops this worker",
                signal.Signals(info.si_signo).name,
                info.si_pid,
            )
        signal.pthread_sigmask(signal.SIG_UNBLOCK, stop_signals)
        os.kill(os.getpid(), info.si_signo)  # only this thread takes it now

    thread = threading.Thread(target=take_signals, name="petstore-stop-signals", daemon=True)
    thread.start()
    return thread


def workers_kill_timeout(settings: Settings) -> int:
    """Seconds granian gives its workers to stop once the drain is over: what is left
    of ``shutdown_timeout_seconds`` after ``shutdown_drain_seconds``, rounded down
    (granian takes whole seconds), at least 1 (0 would mean no limit at all)."""
    return max(1, int(settings.shutdown_timeout_seconds - settings.shutdown_drain_seconds))


@contextmanager
def drain_marker() -> Iterator[Path]:
    """The path of the marker file for as long as the block runs, in a new directory
    only this user may enter, and set in ``PETSTORE_INTERNAL_DRAIN_FILE`` for the
    workers started inside the block. The directory is removed at the end."""
    directory = Path(tempfile.mkdtemp(prefix="petstore-serve-"))
    marker = directory / "draining"
    os.environ[DRAIN_FILE_VARIABLE] = str(marker)
    try:
        yield marker
    finally:
        os.environ.pop(DRAIN_FILE_VARIABLE, None)
        shutil.rmtree(directory, ignore_errors=True)


class Drain:
    """The SIGTERM and SIGINT handling of ``serve``'s main process: ``seconds`` of
    drain (the marker file ``marker`` exists) before granian's own stop.

    :meth:`install` must run after granian installed its signal handlers and before
    it forks the workers: a granian startup hook (``Granian.on_startup``) does both.
    """

    def __init__(self, *, seconds: float, marker: Path) -> None:
        self.seconds = seconds
        self.marker = marker
        self._pid = os.getpid()
        self._stop: SignalHandler | None = None
        self._lock = threading.Lock()
        self._draining = False
        self._stopping = False

    def install(self) -> None:
        """Put :meth:`_on_sigterm` and :meth:`_on_sigint` in front of granian's
        handler, which they call to stop. Raises RuntimeError when SIGTERM has no
        Python handler yet (called too early)."""
        granian = signal.getsignal(signal.SIGTERM)
        if not callable(granian):
            raise RuntimeError("granian's SIGTERM handler is not installed yet")
        self._pid = os.getpid()
        self._stop = granian
        signal.signal(signal.SIGTERM, self._on_sigterm)
        signal.signal(signal.SIGINT, self._on_sigint)

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if self._draining:
            self.stop("a second SIGTERM")
        elif self.seconds == 0:
            self.stop("SIGTERM")
        else:
            self._draining = True
            self.marker.touch()
            log.info(
                "SIGTERM: draining for %g s (/readyz answers 503, requests are still served)",
                self.seconds,
            )
            logs.flush()
            timer = threading.Timer(self.seconds, self.stop, args=("the drain is over",))
            timer.daemon = True
            timer.start()

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        self.stop("SIGINT")

    def stop(self, reason: str) -> None:
        """Start granian's graceful stop now, the first call only: no new connections,
        requests in flight finish, the workers exit or are killed. ``reason`` goes
        into the log line."""
        with self._lock:
            if self._stopping or self._stop is None:
                return
            self._stopping = True
        if os.getpid() == self._pid:
            self.marker.touch()
            stop_marker(self.marker).touch()
            log.info("%s: stopping (requests in flight finish, then the workers exit)", reason)
            logs.flush()
        self._stop(signal.SIGTERM, None)
