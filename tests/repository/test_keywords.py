"""Keywords, not positions: a record type (a dataclass, a NamedTuple, a msgspec
struct) of the client, the command and the test bed with two members of one type
(``None`` aside: ``str`` and ``str | None`` are one) is made with keywords only, so
two of its values can never trade places unseen. A dataclass or a struct says so
with ``kw_only=True``, which mypy and Python then enforce; a NamedTuple cannot, so
such a one is no NamedTuple."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import pytest

from tests import ROOT

FOLDERS = [
    ROOT / "src" / "petstore" / "client",
    ROOT / "src" / "petstore" / "cli",
    ROOT / "testbed",
]


def _shared_types(node: ast.ClassDef) -> list[str]:
    """The types, ``None`` aside, of two or more of the class's members."""
    types = Counter(
        " | ".join(sorted(set(ast.unparse(item.annotation).split(" | ")) - {"None"}))
        for item in node.body
        if isinstance(item, ast.AnnAssign)
        and isinstance(item.target, ast.Name)
        and "ClassVar" not in ast.unparse(item.annotation)
    )
    return [kind for kind, count in types.items() if count > 1]


def _positional_records(path: Path) -> list[str]:
    """The record types of ``path`` with two members of one type that may be made
    with positions."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef) or not _shared_types(node):
            continue
        marks = [ast.unparse(d) for d in node.decorator_list] + [
            ast.unparse(base) for base in node.bases
        ]
        record = any(
            mark.split("(")[0].split(".")[-1] in ("dataclass", "NamedTuple", "Struct")
            for mark in marks
        )
        keywords = any("kw_only=True" in mark for mark in marks) or any(
            keyword.arg == "kw_only" for keyword in node.keywords
        )
        if record and not keywords:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_records_with_two_members_of_one_type_take_keywords_only(folder: Path) -> None:
    found = [line for path in sorted(folder.rglob("*.py")) for line in _positional_records(path)]
    assert found == []
