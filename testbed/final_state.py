"""The final state of a chaos run read from every PostgreSQL data node directly, not
only through the service, and the views compared: after the faults healed and the
secondaries caught up, every node must hold the same animals as the primary, and
the service must answer the same.

:func:`node_states` does the I/O (psycopg to each node's own address, from the
harness's host); :func:`disagreements` is pure."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import LiteralString

import psycopg
from psycopg.rows import dict_row

from testbed.failover import NODES, PostgresNodes
from testbed.ops import SELECT_PETS, Pet, pets_from_rows
from testbed.processes import ServerUnavailableError


def node_states(pg: PostgresNodes, *, seconds: float = 60) -> dict[str, list[Pet] | None]:
    """Every animal of each data node (``node1``..), the primary first, read once
    each secondary has replayed the primary's WAL up to where it was when asked (or
    after ``seconds``, whatever they hold then); None for a node that did not
    answer. Call from a host that reaches the nodes (the cluster's harness)."""
    try:
        primary = pg.primary()
    except (psycopg.Error, ServerUnavailableError):
        primary = 0
    order = [primary, *(i for i in range(NODES) if i != primary)]
    target = _one(pg.node_url(primary), "SELECT pg_current_wal_lsn()::text", ())
    deadline = time.monotonic() + seconds
    caught_up = "SELECT coalesce(pg_last_wal_replay_lsn() >= %s::pg_lsn, false)"
    for index in order[1:]:
        while target is not None and time.monotonic() < deadline:
            if _one(pg.node_url(index), caught_up, (target,)) is True:
                break
            time.sleep(0.5)
    return {f"node{i + 1}": _rows(pg.node_url(i)) for i in order}


def _one(url: str, query: LiteralString, params: tuple[object, ...]) -> object:
    """The first column of the first row of ``query`` with ``params``; None when the
    node does not answer within 5 s."""
    try:
        with psycopg.connect(url, connect_timeout=5) as connection:
            row = connection.execute(query, params).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else row[0]


def _rows(url: str) -> list[Pet] | None:
    """Every animal at ``url`` in id order, every member of Pet read; None when the
    node does not answer."""
    try:
        with psycopg.connect(url, connect_timeout=5, row_factory=dict_row) as connection:
            rows = connection.execute(SELECT_PETS).fetchall()
    except psycopg.Error:
        return None
    return pets_from_rows(rows)


def disagreements(views: Mapping[str, list[Pet] | None]) -> list[str]:
    """How each view of ``views`` (name -> its animals, None when it could not be
    read) differs from the first: one line per view that differs, naming the ids it
    lacks, holds besides, and holds with other values (up to 5 of each). Empty when
    all agree; raises ValueError when ``views`` is empty."""
    if not views:
        raise ValueError("no view to compare")
    (first, reference), *others = views.items()
    if reference is None:
        return [f"{first} could not be read"]
    mine = {pet.id: pet for pet in reference}
    found = []
    for name, pets in others:
        if pets is None:
            found.append(f"{name} could not be read")
            continue
        theirs = {pet.id: pet for pet in pets}
        lacks = sorted(mine.keys() - theirs.keys())
        extra = sorted(theirs.keys() - mine.keys())
        differ = sorted(i for i in mine.keys() & theirs.keys() if mine[i] != theirs[i])
        parts = [
            f"{what} {len(ids)} (ids {ids[:5]})"
            for what, ids in (("lacks", lacks), ("holds besides", extra), ("differs in", differ))
            if ids
        ]
        if parts:
            found.append(f"{name} against {first}: {', '.join(parts)}")
    return found
