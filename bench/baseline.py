"""The baseline: a raw ASGI app (no framework) that does what no service can do
faster. It checks the bearer key like the service (constant-time compare) and
answers each scenario with the bytes the service answered when captured, same
status, same headers, same body.

Run it like the service, under granian with one worker::

    BENCH_BASELINE_AUTHORIZATION="Bearer <key>" BENCH_BASELINE_ANSWERS=answers.json \\
        granian --interface asgi --workers 1 bench.baseline:app

``answers.json`` is written by ``bench.capture``: a list of objects with
``method``, ``path``, ``query``, ``status``, ``headers`` (pairs) and ``body``
(base64). The environment is read once, at import.
"""

from __future__ import annotations

import base64
import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
AnswerKey = tuple[str, str, bytes]
Answer = tuple[Message, Message]


def answer_key(method: str, path: str, query: bytes) -> AnswerKey:
    """What a request is answered by: one answer for every ``/v1/pets/{id}``, one for
    every page requested with a cursor (S5), otherwise the exact path and query."""
    if path.startswith("/v1/pets/"):
        return method, "/v1/pets/{id}", b""
    if b"cursor=" in query:
        return method, path, b"cursor=*"
    return method, path, query


def load_answers(path: str) -> dict[AnswerKey, Answer]:
    """The captured answers in ``path``, as ready-made ASGI messages."""
    with open(path, encoding="utf-8") as file:
        entries = json.load(file)
    answers: dict[AnswerKey, Answer] = {}
    for entry in entries:
        key = answer_key(entry["method"], entry["path"], entry["query"].encode("latin-1"))
        start = {
            "type": "http.response.start",
            "status": entry["status"],
            "headers": [(n.encode("latin-1"), v.encode("latin-1")) for n, v in entry["headers"]],
        }
        body = {"type": "http.response.body", "body": base64.b64decode(entry["body"])}
        answers[key] = (start, body)
    return answers


def _plain(status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> Answer:
    start = {
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", b"application/json"), *(headers or [])],
    }
    return start, {"type": "http.response.body", "body": body}


EXPECTED = os.environ.get("BENCH_BASELINE_AUTHORIZATION", "").encode("latin-1")
_ANSWERS_FILE = os.environ.get("BENCH_BASELINE_ANSWERS")
ANSWERS = load_answers(_ANSWERS_FILE) if _ANSWERS_FILE else {}
HEALTHY = _plain(200, b'{"status":"ok"}')
UNAUTHORIZED = _plain(
    401,
    b'{"code":"unauthorized","message":"the API key is not valid","status":401}',
    [(b"www-authenticate", b'Bearer realm="petstore", error="invalid_token"')],
)
NOT_FOUND = _plain(404, b'{"code":"not_found","message":"no such path","status":404}')


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer from :data:`ANSWERS` after the bearer check; ``/healthz`` needs no key."""
    if scope["type"] == "lifespan":
        await receive()  # lifespan.startup
        await send({"type": "lifespan.startup.complete"})
        await receive()  # lifespan.shutdown
        await send({"type": "lifespan.shutdown.complete"})
        return
    if scope["type"] != "http":
        return
    path: str = scope["path"]
    if path == "/healthz":
        answer = HEALTHY
    else:
        authorization = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value
                break
        if not hmac.compare_digest(authorization, EXPECTED):
            answer = UNAUTHORIZED
        else:
            answer = ANSWERS.get(
                answer_key(scope["method"], path, scope["query_string"]), NOT_FOUND
            )
    if scope["method"] == "POST":
        message = await receive()
        while message.get("more_body"):
            message = await receive()
    start, body = answer
    await send(start)
    await send(body)
