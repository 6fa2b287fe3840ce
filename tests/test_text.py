"""petstore.text: how a URL is shown (its user-info hidden) whatever it holds."""

from __future__ import annotations

import time

import pytest

from petstore.text import printable_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://user:hunter2@127.0.0.1:1/v1", "http://***@127.0.0.1:1/v1"),
        ("https://token@db1/v1", "https://***@db1/v1"),
        ("HTTPS://u:p@DB1", "HTTPS://***@DB1"),
        ("https://u:p@ss@db1/v1?who=a@b", "https://***@db1/v1?who=a@b"),  # the last @
        ("postgresql://petstore:Pa%zzword@db1:5432/petstore", "postgresql://***@db1:5432/petstore"),
        ("user:hunter2@db1:8000/v1", "***@db1:8000/v1"),  # no scheme
        ("http://db1/v1/pets@home", "http://db1/v1/pets@home"),  # an @ in the path
        ("http://db1?to=a@b", "http://db1?to=a@b"),
        ("http://[::1]:8000/v1", "http://[::1]:8000/v1"),
        ("http://u:p\x1b]0;t\x07@db1\u202e/v1", "http://***@db1\\u202e/v1"),
        ("", ""),
    ],
)
def test_a_url_is_shown_without_its_user_info_and_escaped(url: str, shown: str) -> None:
    assert printable_url(url) == shown


def test_a_long_url_without_user_info_is_shown_in_linear_time() -> None:
    url = "http://" + "a" * 1_000_000
    started = time.perf_counter()
    assert printable_url(url) == url
    assert time.perf_counter() - started < 0.5
