"""``create_app(settings)``: every path the service answers, and what it is built from.

Start reading here. :func:`create_app` builds everything a request needs (nothing at
import time) and lists the route table (the operations' declarations are beside
their rules: :meth:`.http.operations.PetsApi.routes`); the lifespan opens and closes
connections and runs the background work (the D16 purge, the kept animals' warm-up).
A request then goes: :mod:`.http.pipeline` (request id, route; for an operation,
what its declaration on the route table says: admission, the body; errors, access
log) -> :mod:`.http.operations` (the operation's rule) -> the rules
(:mod:`.rules.pets`, :mod:`.rules.pagination`, :mod:`.rules.idempotency`,
:mod:`.rules.auth`, :mod:`.rules.ratelimit`) -> :mod:`.store` (SQL). See docs/architecture.md.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from prometheus_client import start_http_server

from petstore.server import errors, shutdown
from petstore.server.clock import Clock, Monotonic, epoch_of, monotonic, utc_now
from petstore.server.config import Settings, load_settings
from petstore.server.http import operations
from petstore.server.http.deprecation import Deprecation
from petstore.server.http.docs import DocsPages
from petstore.server.http.exchange import BodyReader, Request, Response
from petstore.server.http.links import link_base
from petstore.server.http.operations import Creates, PetsApi
from petstore.server.http.pipeline import Service
from petstore.server.http.routes import Route
from petstore.server.rules import pagination, pets
from petstore.server.rules.admission import Admission
from petstore.server.rules.auth import KeyVerifier
from petstore.server.rules.auth_failures import FailedAuthentications
from petstore.server.rules.idempotency import TTL, IdempotentCreates
from petstore.server.rules.kept_pages import KeptPages
from petstore.server.rules.ratelimit import RateLimiter
from petstore.server.store import Store, create_store
from petstore.server.store.counters import Counters
from petstore.server.store.group_commit import GroupCommit
from petstore.server.store.kept_pets import KeptPets
from petstore.server.store.read_grouping import GroupedReads
from petstore.server.telemetry import logs, tracing
from petstore.server.telemetry.logstream import BufferedStderr
from petstore.server.telemetry.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from petstore.server.telemetry.metrics import Metrics

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


def compose_store(
    settings: Settings, *, monotonic: Monotonic = monotonic, tracer: Tracer | None = None
) -> Store:
    """The store the app runs on: the backend of ``settings.database_url`` (each
    statement a span with a ``tracer``, D23), its pets repository inside the speed
    devices ``settings`` turns on, innermost first: group commit, read grouping, kept
    animals (docs/architecture.md). The answers are the plain store's with any device
    on or off, bar changes made elsewhere than through this store, which kept
    answers show within 5 s (``tests/server/store/test_devices.py``)."""
    store = create_store(
        settings.database_url,
        pool_size=settings.database_pool_size,
        monotonic=monotonic,
        tracer=tracer,
    )
    if settings.group_commit:
        store.pets = GroupCommit(store.pets)
    if settings.read_grouping:
        store.pets = GroupedReads(store.pets)
    if settings.keep_answers:
        store.pets = KeptPets(store.pets)
    return store


def create_app(
    settings: Settings,
    *,
    clock: Clock = utc_now,
    monotonic: Monotonic = monotonic,
    drain_marker: str | None = None,
    log_handler: BufferedStderr | None = None,
) -> Service:
    """The ASGI app for ``settings``; ``clock`` is injectable for the sunset (D14),
    idempotency records (D16) and key expiry, ``monotonic`` for what is kept or
    counted for seconds (verified keys, kept answers, the failed-authentication
    limit); once the file ``drain_marker`` exists, ``/readyz`` answers 503
    (:mod:`petstore.server.shutdown`). Access lines go to ``log_handler``, which then
    belongs to this app: its lifespan closes it (without one, to the handler of
    ``logs.configure``, which the lifespan only flushes). The database must already
    be migrated (``petstore db upgrade``); the lifespan connects to it.
    """
    traces = tracing.tracing_from_environment()  # None unless OTEL_* asks for export
    store = compose_store(
        settings, monotonic=monotonic, tracer=None if traces is None else traces.tracer
    )
    rate_limiter = (
        RateLimiter(settings.rate_limit, counters=Counters(settings.redis_url))
        if settings.rate_limit_enabled
        else None
    )
    signer = pagination.CursorSigner(settings.cursor_secret.get_secret_value().encode())
    pages: pagination.PageSource = pagination.Pages(store.pets, signer)
    if settings.keep_answers:
        pages = KeptPages(pages, changes=store.changes)
    metrics = Metrics()
    access_log = logs.AccessLog(log_handler)
    metrics.watch_pool(store.pool_stats)
    if rate_limiter is not None:
        limiter = rate_limiter
        metrics.watch_rate_limit_store(lambda: limiter.store_error is not None)
    admission = Admission(
        KeyVerifier(
            store.api_keys,
            clock=clock,
            monotonic=monotonic,
            cache_seconds=settings.key_cache_seconds,
        ),
        rate_limiter,
        None
        if settings.auth_failure_limit is None
        else FailedAuthentications.from_notation(settings.auth_failure_limit, clock=monotonic),
    )
    links = link_base(settings)
    pets_api = PetsApi(
        store,
        pages=pages,
        creates=Creates(idempotency=IdempotentCreates(), clock=clock, metrics=metrics),
        deprecation=Deprecation(  # getPet's (D14)
            date=settings.deprecation_date,
            sunset=pets.SUNSET,
            replacement=pets.REPLACEMENT,
            epoch=epoch_of(clock),
            links=links,
        ),
        links=links,
        rate_limiter=rate_limiter,
        drain_marker=drain_marker,
    )
    docs = DocsPages(settings)

    async def metrics_page(request: Request, response: Response) -> None:
        """Prometheus metrics, no key (keep this path off the public load balancer)."""
        await response.respond(200, metrics.render(), content_type=METRICS_CONTENT_TYPE)

    routes = [
        *pets_api.routes(),  # the operations of the interface, each declared once
        Route("/v1/openapi.json", GET=docs.openapi_json),
        Route("/v1/docs", GET=docs.docs_page),
        Route("/v1/docs/init.js", GET=docs.docs_init),
        Route("/v1/docs/deprecations", GET=docs.deprecations),
        Route("/v1/docs/assets/{path:path}", GET=docs.assets),
        Route("/healthz", GET=operations.healthz),
        Route("/readyz", GET=pets_api.readyz),
    ]
    if settings.metrics_enabled and settings.metrics_port is None:  # else on a port of its own
        routes.append(Route("/metrics", GET=metrics_page))

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        await store.open()
        purger = asyncio.create_task(_purge_idempotency_records(store, clock, settings))
        warming = asyncio.create_task(store.pets.warm())  # kept animals, ahead of getPet
        metrics_server = None
        if settings.metrics_enabled and settings.metrics_port is not None:
            metrics_server, _ = start_http_server(
                settings.metrics_port, addr=settings.host, registry=metrics.registry
            )
        try:
            yield
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
            purger.cancel()
            warming.cancel()
            if rate_limiter is not None:
                await rate_limiter.close()
            await store.close()
            if traces is not None:
                traces.shutdown()
            access_log.close()  # this app's handler, and only this app's

    return Service(
        routes,
        lifespan=lifespan,
        admission=admission,
        bodies=BodyReader(limit=settings.max_body_bytes, within=settings.body_timeout_seconds),
        metrics=metrics,
        trust_forwarded=settings.trust_forwarded_headers,
        tracer=None if traces is None else traces.tracer,
        request_timeout=settings.request_timeout_seconds,
        access_log=access_log,
    )


async def _purge_idempotency_records(store: Store, clock: Clock, settings: Settings) -> None:
    """Delete idempotency records past their 24 hours (D16), at start and then
    every ``idempotency_purge_seconds``."""
    while True:
        try:
            purged = await store.idempotency_records.purge(created_before=clock() - TTL)
        except errors.PetstoreError:
            errors.log.warning("could not purge expired idempotency records", exc_info=True)
        else:
            if purged:
                errors.log.info("purged %d expired idempotency records", purged)
        await asyncio.sleep(settings.idempotency_purge_seconds)


def _exit_with_parent() -> None:
    """Ask Linux to end this worker when the server process that spawned it dies, even
    by SIGKILL: an orphaned worker would go on serving the port (and the database)
    beside the next server started there."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the request above
        os.kill(os.getpid(), signal.SIGTERM)


def app_from_environment() -> Service:
    """The app for the ``PETSTORE_*`` environment: the factory ``petstore serve`` runs
    in each worker process, which drains when ``serve``'s marker file exists (its path
    in ``PETSTORE_INTERNAL_DRAIN_FILE``, :mod:`petstore.server.shutdown`). The
    worker's log handler (``logs.configure``) is handed to its one app, whose lifespan
    closes it.

    Everything alive once the app is built (the modules, above all) is moved out of
    the garbage collector's reach with ``gc.freeze``: they live as long as the worker,
    and a full collection that walks all of them holds every request in flight while
    it runs, several times a second under load.
    """
    _exit_with_parent()
    settings = load_settings()
    handler = logs.configure(level=settings.log_level, json=settings.json_logs)
    drain_marker = os.environ.get(shutdown.DRAIN_FILE_VARIABLE)
    app = create_app(settings, drain_marker=drain_marker, log_handler=handler)
    gc.collect()  # nothing unreachable goes into the permanent generation
    gc.freeze()
    return app
