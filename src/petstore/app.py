"""``create_app(settings)``: wiring only. Nothing is built at import time.

The lifespan opens the store and builds the services the endpoints share; it
closes the store at shutdown.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from datetime import UTC, datetime

from prometheus_client import start_http_server
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp

from petstore import api, db, docs, errors, logs, pagination, pets
from petstore.auth import KeyVerifier
from petstore.config import Settings, load_settings
from petstore.idempotency import TTL, IdempotentCreates
from petstore.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from petstore.metrics import Metrics
from petstore.middleware import ServiceMiddleware, error_log
from petstore.ratelimit import RateLimiter
from petstore.store import Store, open_store

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    """The current time, aware, in UTC: the default clock."""
    return datetime.now(UTC)


async def _render_error(request: Request, exc: Exception) -> Response:
    """The Error body (D10) of a Starlette endpoint's error, ours or Starlette's. Any
    other exception is a 500 ``internal_error``; Starlette raises it again after this
    answer and the service middleware logs it."""
    if isinstance(exc, HTTPException):
        exc = errors.from_http_status(exc.status_code, exc.headers)
    elif not isinstance(exc, errors.PetstoreError):
        exc = errors.InternalError("an unexpected error occurred; it has been logged")
    api.log_fault(exc, request.state.request_id)
    return Response(
        exc.body(), status_code=exc.status, headers=exc.headers, media_type="application/json"
    )


async def _purge_idempotency_records(store: Store, clock: Clock, settings: Settings) -> None:
    """Delete idempotency records past their 24 hours (D16), at start and then
    every ``idempotency_purge_seconds``."""
    while True:
        try:
            purged = await store.purge_idempotency_records(created_before=clock() - TTL)
        except errors.PetstoreError:
            error_log.warning("could not purge expired idempotency records", exc_info=True)
        else:
            if purged:
                error_log.info("purged %d expired idempotency records", purged)
        await asyncio.sleep(settings.idempotency_purge_seconds)


def create_app(settings: Settings, *, clock: Clock = utc_now) -> ServiceMiddleware:
    """The ASGI app for ``settings``; ``clock`` is injectable for the sunset (D14) and
    key expiry. The database must already be migrated (``db.upgrade``).

    The service middleware is outermost: it answers the ``/v1/pets`` operations
    itself (:class:`api.PetsApi`) and hands every other request to Starlette.
    """
    pets_api = api.PetsApi()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        store = await open_store(settings.database_url, pool_size=settings.database_pool_size)
        app.state.services = services = api.Services(
            store=store,
            verifier=KeyVerifier(store, clock=clock, cache_seconds=settings.key_cache_seconds),
            cursors=pagination.CursorSigner(settings.cursor_secret.get_secret_value().encode()),
            clock=clock,
            check_sunset=pets.sunset_check(None if clock is utc_now else clock),
            max_body_bytes=settings.max_body_bytes,
            body_timeout_seconds=settings.body_timeout_seconds,
            schema_usable=db.schema_is_usable,
            deprecation_headers={
                "Deprecation": f"@{int(settings.deprecation_date.timestamp())}",  # RFC 9745
                "Sunset": pets.SUNSET_HEADER,  # RFC 8594
            },
            rate_limiter=(
                RateLimiter(settings.rate_limit, redis_url=settings.redis_url)
                if settings.rate_limit_enabled
                else None
            ),
            idempotency=IdempotentCreates(),
            metrics=metrics,
        )
        pets_api.bind(services)
        metrics.watch_pool(store.pool_stats)
        purger = asyncio.create_task(_purge_idempotency_records(store, clock, settings))
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
            if services.rate_limiter is not None:
                await services.rate_limiter.close()
            await store.close()

    metrics = Metrics()

    async def metrics_page(request: Request) -> Response:
        """Prometheus metrics, no key (keep this path off the public load balancer)."""
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    routes = [
        Route("/healthz", api.healthz, methods=["GET"]),
        Route("/readyz", api.readyz, methods=["GET"]),
        *docs.routes(settings),
    ]
    if settings.metrics_enabled and settings.metrics_port is None:
        routes.append(Route("/metrics", metrics_page, methods=["GET"]))
    app = Starlette(
        routes=routes,
        exception_handlers={
            errors.PetstoreError: _render_error,
            HTTPException: _render_error,
            Exception: _render_error,
        },
        lifespan=lifespan,
    )
    app.router.redirect_slashes = False
    return ServiceMiddleware(
        app, api=pets_api, metrics=metrics, trust_forwarded=settings.trust_forwarded_headers
    )


def configure_logging(settings: Settings) -> None:
    """Log to stderr at ``settings.log_level``; every line names its request id (D18)."""
    logs.configure(level=settings.log_level, json=settings.json_logs)


def _exit_with_parent() -> None:
    """Ask Linux to end this worker when the server process that spawned it dies, even
    by SIGKILL: an orphaned worker would go on serving the port (and the database)
    beside the next server started there."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGTERM)
    if os.getppid() == 1:  # the parent died before the request above
        os.kill(os.getpid(), signal.SIGTERM)


def app_from_environment() -> ASGIApp:
    """The app for the ``PETSTORE_*`` environment: the factory ``petstore serve`` runs
    in each worker process.

    Everything alive once the app is built (the modules, above all) is moved out of
    the garbage collector's reach with ``gc.freeze``: they live as long as the worker,
    and a full collection that walks all of them held every request in flight for
    tens of milliseconds, several times a second under load (docs/performance.md).
    """
    _exit_with_parent()
    settings = load_settings()
    configure_logging(settings)
    app = create_app(settings)
    gc.collect()  # nothing unreachable goes into the permanent generation
    gc.freeze()
    return app
