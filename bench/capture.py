"""What the baseline replays, and where S5 reads: both taken from the real service.

:func:`answers` requests each scenario once and keeps status, headers and body as
sent. :func:`deep_paths` walks the store by ``rel="next"`` until past 90% of the
ids and returns the next pages' paths, cursors issued by the service itself.
"""

from __future__ import annotations

import base64
import http.client
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from bench.scenarios import Request
from bench.seed import Progress

_NEXT = re.compile(r'<([^>]+)>\s*;\s*rel="next"')
#: Set by granian itself on every answer; the baseline's granian sets its own.
_SERVER_HEADERS = {"date", "server"}


class CaptureError(RuntimeError):
    """The service did not answer a capture request as a healthy service would."""


@dataclass(frozen=True, slots=True)
class Answer:
    """One response as received."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def next_path(self) -> str | None:
        """The path and query of the ``Link: rel="next"`` target, if any."""
        for name, value in self.headers:
            if name.lower() == "link" and (match := _NEXT.search(value)):
                parts = urlsplit(match.group(1))
                return f"{parts.path}?{parts.query}"
        return None


class Client:
    """One keep-alive connection to a server, sending the bearer key."""

    def __init__(self, port: int, key: str) -> None:
        self._conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        self._key = key

    def send(self, request: Request) -> Answer:
        headers = {"Authorization": f"Bearer {self._key}"}
        if request.body:
            headers["Content-Type"] = "application/json"
        self._conn.request(request.method, request.path, body=request.body or None, headers=headers)
        response = self._conn.getresponse()
        body = response.read()
        if not 200 <= response.status < 300:
            raise CaptureError(f"{request.method} {request.path}: {response.status} {body[:300]!r}")
        return Answer(response.status, response.getheaders(), body)

    def close(self) -> None:
        self._conn.close()


def _entry(request: Request, answer: Answer) -> dict[str, Any]:
    path, _, query = request.path.partition("?")
    return {
        "method": request.method,
        "path": path,
        "query": query,
        "status": answer.status,
        "headers": [[n.lower(), v] for n, v in answer.headers if n.lower() not in _SERVER_HEADERS],
        "body": base64.b64encode(answer.body).decode(),
    }


def answers(client: Client, requests: list[Request], *, into: Path) -> list[str]:
    """Send each of ``requests`` once, write the answers to ``into`` (the baseline's
    answers file) and return one summary line per answer."""
    entries, lines = [], []
    for request in requests:
        answer = client.send(request)
        entries.append(_entry(request, answer))
        lines.append(
            f"{request.method} {request.path}: {answer.status}, {len(answer.body)} body bytes, "
            f"{len(answer.headers)} headers"
        )
    into.write_text(json.dumps(entries, indent=1))
    return lines


def deep_paths(client: Client, *, pets: int, limit: int, count: int) -> list[str]:
    """Up to ``count`` consecutive page paths of ``limit`` animals that start past 90%
    of the ``pets`` seeded ids, each from the service's ``Link: rel="next"``.

    Walks the store 100 animals a page to get there. Raises CaptureError when no
    page starts past 90% (a store too small to page).
    """
    deep_id = int(pets * 0.9)
    progress = Progress("walking to 90% of the ids", deep_id)
    path: str | None = "/v1/pets?limit=100"
    while path is not None:
        answer = client.send(Request("GET", path))
        page = json.loads(answer.body)
        last_id = page[-1]["id"] if page else 0
        progress.show(min(last_id, deep_id))
        path = answer.next_path()
        if last_id >= deep_id:
            break
    progress.finish()
    if path is None:
        raise CaptureError(f"no next page after id {deep_id}: seed more animals (--pets)")
    parts = urlsplit(path)
    query = dict(parse_qsl(parts.query))
    query["limit"] = str(limit)
    paths = [f"{parts.path}?{urlencode(query)}"]
    while len(paths) < count:
        following = client.send(Request("GET", paths[-1])).next_path()
        if following is None:
            break
        paths.append(following)
    print(f"S5 cycles through {len(paths)} pages of {limit} past id {deep_id}", file=sys.stderr)
    return paths
