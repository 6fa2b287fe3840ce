"""Each speed device gives the plain store's answers (STYLE "Mend").

A stateful property test (hypothesis) runs random sequences of writes, getPets, list
walks and changes made outside the API (an operator's UPDATE or DELETE in SQL)
against two stores on one database: the plain store and a store inside the devices
under test (``server.app.compose_store``, and ``KeptPages`` around its pages),
moving the injected clock by hand. Both must answer alike and as the database does.

The writes are learnt from the repositories themselves (:func:`write_methods`):
every public coroutine of the unit of work's animals (``tx.pets``,
``PetsInTransaction``, run in ``store.transaction()``) and of ``store.pets``, with
arguments drawn from their type hints, so a write method added to either is run here
with no edit of this test. What a write did is read back from the database, and an
animal it changed must be answered as it is now at once by the store it went through:
a write that changes animals and does not move that store's change signal fails.
``PetsInTransaction`` holds only adds today; the test gives it two example writes
that change animals (:data:`EXAMPLE_WRITES`: a rename and a delete, as an operation
would be written), learnt like any other.

Concurrent creates (group commit) and creates under an Idempotency-Key (the rule
that composes ``tx.pets`` and ``tx.idempotency``) have rules of their own. A write
through the devices' own store is answered at once; one made elsewhere (outside the
API, or through the plain store, another instance as far as the devices can tell)
may be answered as it was for up to ``KEPT_SECONDS`` after the change
(docs/operations/run.md). No test sleeps.
"""

from __future__ import annotations

import asyncio
import inspect
import typing
from collections.abc import Callable, Coroutine, Sequence
from datetime import timedelta
from typing import Any, TypeVar

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from petstore.schemas import NewPet, Pet, PetStatus
from petstore.server.app import compose_store
from petstore.server.config import Settings
from petstore.server.rules.idempotency import TTL, IdempotencyClaim, create_with_key, fingerprint
from petstore.server.rules.kept_pages import KeptPages
from petstore.server.rules.pagination import CursorSigner, Pages, PageSource
from petstore.server.store import PetRepository, Store, open_store
from petstore.server.store.changes import KEPT_SECONDS
from petstore.server.store.pets import PetsInTransaction
from petstore.server.store.rows import into, select_list
from tests.conftest import NOW, run_sql

T = TypeVar("T")

#: The devices each run turns on: each alone, then all of them.
DEVICE_SETS = {
    "group_commit": {"group_commit"},
    "read_grouping": {"read_grouping"},
    "keep_answers": {"keep_answers"},
    "all": {"group_commit", "read_grouping", "keep_answers"},
}
NAMES = st.sampled_from(["Rex", "Tom", "Kitty", "Rex"])
STATUSES = st.sampled_from(list(PetStatus))
KEYS = st.sampled_from(["k1", "k2", "k3"])
NEW_PETS = st.builds(NewPet, name=NAMES, category_id=st.integers(1, 3), status=STATUSES)

#: The example writes' statements, in each dialect: one animal renamed or deleted,
#: by id.
_PET = select_list(Pet)
RENAME = {
    "sqlite": f"UPDATE pets SET name = name || '~' WHERE id = :id RETURNING {_PET}",  # noqa: S608
    "postgres": f"UPDATE pets SET name = name || '~' WHERE id = %(id)s RETURNING {_PET}",  # noqa: S608
}
DELETE = {
    "sqlite": "DELETE FROM pets WHERE id = :id RETURNING id",
    "postgres": "DELETE FROM pets WHERE id = %(id)s RETURNING id",
}


def example_writes(dialect: str) -> dict[str, Callable[..., Any]]:
    """Two writes that change animals, as an operation would add them to
    ``PetsInTransaction`` (``dialect``'s statements): ``rename`` and ``delete``."""

    async def rename(self: PetsInTransaction, pet_id: int) -> Pet | None:
        rows = await self._tx.fetch(RENAME[dialect], {"id": pet_id})
        return into(Pet, rows[0]) if rows else None

    async def delete(self: PetsInTransaction, pet_id: int) -> bool:
        return bool(await self._tx.fetch(DELETE[dialect], {"id": pet_id}))

    return {"rename": rename, "delete": delete}


#: Where each learnt write runs: in a transaction of the unit of work, or on store.pets.
IN_TRANSACTION, ON_THE_STORE = "tx.pets", "store.pets"
#: store.pets's coroutines that are no operation: its lifecycle.
LIFECYCLE = {"close"}


def write_methods() -> list[tuple[str, str]]:
    """Every write a caller can make to animals, as ``(where, name)``: each public
    coroutine of ``PetsInTransaction`` and of ``PetRepository`` (reads among them:
    one changes nothing, so running it costs only time), bar the lifecycle."""
    return [
        (where, name)
        for where, kind in ((IN_TRANSACTION, PetsInTransaction), (ON_THE_STORE, PetRepository))
        for name, method in inspect.getmembers(kind, inspect.iscoroutinefunction)
        if not name.startswith("_") and name not in LIFECYCLE
    ]


def arguments(method: Callable[..., Any], ids: list[int]) -> st.SearchStrategy[dict[str, Any]]:
    """Keyword arguments for ``method``, drawn by each parameter's type hint; an
    ``int`` is an id of ``ids`` (the animals, one past them and 0)."""
    hints = typing.get_type_hints(method)
    by_hint: dict[Any, st.SearchStrategy[Any]] = {
        NewPet: NEW_PETS,
        Sequence[NewPet]: st.lists(NEW_PETS, min_size=1, max_size=4),
        int: st.sampled_from(ids),
        Sequence[int]: st.lists(st.sampled_from(ids), max_size=5),
        PetStatus: STATUSES,
        PetStatus | None: st.none() | STATUSES,
        str: NAMES,
    }
    names = [name for name in inspect.signature(method).parameters if name != "self"]
    return st.fixed_dictionaries(
        {name: by_hint.get(hints[name], st.from_type(hints[name])) for name in names}
    )


def machine(url: str, devices: set[str]) -> type[RuleBasedStateMachine]:
    """The state machine for the database at ``url`` (emptied for each example) and
    the ``devices`` named (settings of the same names)."""

    class Equivalence(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            run_sql(url, "DELETE FROM idempotency_records")
            run_sql(url, "DELETE FROM pets")
            self.loop = asyncio.new_event_loop()
            self.now = 0.0  # the injected monotonic clock, seconds
            self.model: dict[int, Pet] = {}  # what the database holds
            # Each animal changed outside the API: (when, as it was before), in order.
            self.replaced: dict[int, list[tuple[float, Pet]]] = {}
            self.claims: dict[str, tuple[str, int]] = {}  # key -> (fingerprint, pet id)
            self.highest = 0  # the highest id handed out in this example
            chosen = Settings(
                database_url=url,
                group_commit="group_commit" in devices,
                read_grouping="read_grouping" in devices,
                keep_answers="keep_answers" in devices,
            )
            self.plain: Store = self.run(open_store(url))
            self.devices = compose_store(chosen, monotonic=lambda: self.now)
            self.run(self.devices.open())
            signer = CursorSigner(b"equivalence-test-cursor-secret-0123456789")
            self.plain_pages = Pages(self.plain.pets, signer)
            self.pages: PageSource = Pages(self.devices.pets, signer)
            if chosen.keep_answers:
                self.pages = KeptPages(self.pages, changes=self.devices.changes)

        def run(self, work: Coroutine[Any, Any, T]) -> T:
            return self.loop.run_until_complete(work)

        def teardown(self) -> None:
            self.run(self.devices.close())
            self.run(self.plain.close())
            self.loop.close()

        def settled(self, pet_id: int) -> bool:
            """Whether every instance must answer ``pet_id`` as the database does."""
            changes = self.replaced.get(pet_id)
            return not changes or self.now - changes[-1][0] >= KEPT_SECONDS

        def recent(self, pet_id: int) -> list[Pet]:
            """What ``pet_id`` was until a change less than KEPT_SECONDS ago."""
            changes = self.replaced.get(pet_id, [])
            return [old for when, old in changes if self.now - when < KEPT_SECONDS]

        # Writes -----------------------------------------------------------------

        @rule(
            data=st.data(), method=st.sampled_from(write_methods()), through_devices=st.booleans()
        )
        def write(
            self, data: st.DataObject, method: tuple[str, str], through_devices: bool
        ) -> None:
            """One learnt write (:func:`write_methods`) through either store, its
            arguments drawn; what it did read back from the database. New animals lie
            above every id handed out before (D5, D9) and are answered as created;
            through the devices' own store, every answer is the database's at once
            (an animal changed, and a walk); through the plain store, the devices'
            may answer a changed animal as it was within the bound, as for a change
            made outside the API."""
            where, name = method
            kind = PetsInTransaction if where == IN_TRANSACTION else PetRepository
            kwargs = data.draw(
                arguments(getattr(kind, name), [*sorted(self.model), self.next_id(), 0])
            )
            # Kept, where kept answers are on: every animal, and the pages of a walk.
            for pet_id in self.model:
                self.run(self.devices.pets.get(pet_id))
            self.run(self.walked(self.pages, None, 2))
            store = self.devices if through_devices else self.plain
            result = self.run(self.call(store, where, name, kwargs))
            stored = self.stored()
            added = sorted(set(stored) - set(self.model))
            changed = [i for i, pet in self.model.items() if stored.get(i) != pet]
            assert all(pet_id > self.highest for pet_id in added)
            self.highest = max([self.highest, *added])
            answered = result if isinstance(result, list) else [result]
            for pet in answered:
                if isinstance(pet, Pet) and pet.id in added:
                    assert pet == stored[pet.id]
            if not through_devices:
                for pet_id in changed:
                    self.replaced.setdefault(pet_id, []).append((self.now, self.model[pet_id]))
            self.model = stored
            if through_devices:
                if changed:
                    self.replaced.clear()  # every answer kept before is dropped
                for pet_id in [*changed, *added]:
                    assert self.run(self.devices.pets.get(pet_id)) == stored.get(pet_id)
                self.walk(None, 2)

        async def call(self, store: Store, where: str, name: str, kwargs: dict[str, Any]) -> Any:
            if where == ON_THE_STORE:
                return await getattr(store.pets, name)(**kwargs)
            async with store.transaction() as tx:
                return await getattr(tx.pets, name)(**kwargs)

        def stored(self) -> dict[int, Pet]:
            """The animals the database holds, by id."""
            rows = run_sql(url, f"SELECT {_PET} FROM pets ORDER BY id")  # noqa: S608
            return {row["id"]: into(Pet, row) for row in rows}

        @rule(count=st.integers(2, 6), name=NAMES)
        def create_together(self, count: int, name: str) -> None:
            """Concurrent creates: one group commit or several."""
            news = [NewPet(f"{name} {n % 2}", 1 + n % 2, PetStatus.PENDING) for n in range(count)]

            async def together() -> list[Pet]:
                return list(await asyncio.gather(*map(self.devices.pets.create, news)))

            pets = self.run(together())
            assert [(p.name, p.category_id, p.status) for p in pets] == [
                (n.name, n.category_id, n.status) for n in news
            ]
            assert len({p.id for p in pets}) == count
            assert min(p.id for p in pets) > self.highest
            self.highest = max(p.id for p in pets)
            self.model.update((pet.id, pet) for pet in pets)

        @rule(key=KEYS, name=NAMES, through_devices=st.booleans())
        def create_with_key(self, key: str, name: str, through_devices: bool) -> None:
            """A create under an Idempotency-Key (the rule, over the unit of work): the
            first stores, a repeat through either store gets the same record back and
            stores nothing."""
            store = self.devices if through_devices else self.plain
            new = NewPet(name, 2, PetStatus.SOLD)
            claim = IdempotencyClaim(
                api_key_id=1,
                key=key,
                fingerprint=fingerprint(new),
                created_at=NOW,
                expired_before=NOW - TTL,
            )
            outcome = self.run(create_with_key(store, new, claim=claim))
            if key in self.claims:
                assert outcome.replayed
                assert (outcome.record.fingerprint, outcome.record.pet.id) == self.claims[key]
            else:
                assert not outcome.replayed
                pet_id = outcome.record.pet.id
                assert pet_id > self.highest
                self.highest = pet_id
                self.claims[key] = (claim.fingerprint, pet_id)
                self.model[pet_id] = Pet(pet_id, new.name, new.category_id, new.status)
                assert self.run(self.devices.pets.get(pet_id)) == self.model[pet_id]
            found = self.run(
                self.plain.idempotency_records.find(1, key, created_after=NOW - timedelta(hours=1))
            )
            assert found is not None
            assert found.pet.id == self.claims[key][1]

        # Changes made outside the API, and time ------------------------------------

        @rule(data=st.data(), delete=st.booleans())
        def change_outside_the_api(self, data: st.DataObject, delete: bool) -> None:
            if self.model:
                self.change(data.draw(st.sampled_from(sorted(self.model))), delete=delete)

        def change(self, pet_id: int, *, delete: bool) -> None:
            """An operator's UPDATE or DELETE of ``pet_id`` in SQL."""
            self.replaced.setdefault(pet_id, []).append((self.now, self.model[pet_id]))
            if delete:
                run_sql(url, "DELETE FROM pets WHERE id = ?", (pet_id,))
                del self.model[pet_id]
            else:
                run_sql(url, "UPDATE pets SET name = name || '!' WHERE id = ?", (pet_id,))
                old = self.model[pet_id]
                self.model[pet_id] = Pet(pet_id, old.name + "!", old.category_id, old.status)

        @rule(data=st.data(), delete=st.booleans())
        def change_while_kept(self, data: st.DataObject, delete: bool) -> None:
            """An animal kept, changed outside the API, asked for again once the
            version was looked at (which vouches for what is kept only while it did
            not move), and again once the bound has passed: then it is the new one."""
            if not self.model:
                return
            pet_id = data.draw(st.sampled_from(sorted(self.model)))
            self.run(self.devices.pets.get(pet_id))
            self.change(pet_id, delete=delete)
            self.now += 1.5
            self.run(self.devices.pets.get(pet_id))
            self.run(self.devices.changes.settled())
            self.now += KEPT_SECONDS - 1.0  # the bound from the change, not from the look
            assert self.run(self.devices.pets.get(pet_id)) == self.model.get(pet_id)

        @rule(seconds=st.sampled_from([0.5, 1.5, 3.0, KEPT_SECONDS, 6.0]))
        def advance(self, seconds: float) -> None:
            self.now += seconds

        # Reads --------------------------------------------------------------------

        @rule(data=st.data())
        def get(self, data: st.DataObject) -> None:
            known = sorted({*self.model, *self.replaced})
            pet_id = data.draw(st.sampled_from([*known, self.next_id(), 0]))
            plain = self.run(self.plain.pets.get(pet_id))
            assert plain == self.model.get(pet_id)
            answer = self.run(self.devices.pets.get(pet_id))
            if self.settled(pet_id):
                assert answer == plain
            else:  # within the bound: as it is, or as it was less than the bound ago
                assert answer in (plain, *self.recent(pet_id))

        @rule(data=st.data(), count=st.integers(2, 6))
        def get_together(self, data: st.DataObject, count: int) -> None:
            """Concurrent getPets, in any order, unknown ids among them: each gets its own."""
            known = sorted({*self.model, *self.replaced})
            choices = st.sampled_from([*known, self.next_id()])
            pet_ids = data.draw(st.lists(choices, min_size=count, max_size=count))

            async def together() -> list[Pet | None]:
                return list(await asyncio.gather(*map(self.devices.pets.get, pet_ids)))

            for pet_id, answer in zip(pet_ids, self.run(together()), strict=True):
                if self.settled(pet_id):
                    assert answer == self.model.get(pet_id)

        def next_id(self) -> int:
            """An id above every id the database has handed out in this example."""
            return self.highest + 1

        @rule(status=st.none() | STATUSES, limit=st.integers(1, 4))
        def walk(self, status: PetStatus | None, limit: int) -> None:
            """A list walk by rel="next" through each store, page by page."""
            expected = [p for _, p in sorted(self.model.items()) if status in (None, p.status)]
            plain = self.run(self.walked(self.plain_pages, status, limit))
            walked = [pet for page in plain for pet in msgspec.json.decode(page, type=list[Pet])]
            assert walked == expected
            pages = self.run(self.walked(self.pages, status, limit))
            if all(self.settled(pet_id) for pet_id in self.replaced):
                assert pages == plain

        async def walked(
            self, pages: PageSource, status: PetStatus | None, limit: int
        ) -> list[bytes]:
            bodies, cursor = [], None
            while True:
                body, cursor = await pages.page(status=status, limit=limit, cursor=cursor)
                bodies.append(body)
                if cursor is None:
                    return bodies

        @invariant()
        def every_created_animal_is_found_by_the_plain_store(self) -> None:
            ids = sorted(self.model)[-8:]
            assert self.run(self.plain.pets.get_many(ids)) == [self.model[i] for i in ids]

    return Equivalence


@pytest.mark.parametrize("devices", DEVICE_SETS)
def test_each_speed_device_answers_as_the_plain_store(
    database_url: str, devices: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dialect = "sqlite" if database_url.startswith("sqlite") else "postgres"
    for name, method in example_writes(dialect).items():
        monkeypatch.setattr(PetsInTransaction, name, method, raising=False)
    run_state_machine_as_test(
        machine(database_url, DEVICE_SETS[devices]),
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
