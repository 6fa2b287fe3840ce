"""The short ``make recovery-drill`` (D28): the deployment of deploy/ on test hosts
with its pgBackRest repository, under load from client workers; one operator's
mistake undone by a restore to the moment before it onto new data nodes, then every
data node lost and restored through the newest archived WAL.

Nothing acknowledged before the mistake may be missing or changed, nothing created
after it may come back, no id issued before a restore may be issued again (D5), and
Idempotency-Keys replay the same animal; the total loss may lose only the
acknowledged creates of D28's last 60 s, and the service must answer ``/readyz`` 200
through the load balancers' address again within its 10 minutes. The run removes
every namespace, mount and process it made, which the test checks too.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from testbed import disks, hosts, recovery_drill


@pytest.fixture
def root() -> Iterator[Path]:
    """A folder the cluster's ``postgres`` user can reach (pytest's own are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="petstore-test-recovery-drill-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (as CI runs)")
def test_the_short_drill_undoes_a_mistake_and_loses_at_most_a_minute(root: Path) -> None:
    out = io.StringIO()
    counts = recovery_drill.run(root, workers=3, load=10, mistakes=1, out=out)
    print(out.getvalue())
    lines = out.getvalue().splitlines()
    assert counts["acknowledged"] > 300
    for anomaly in ("missing", "changed", "extra", "reused"):
        assert counts[anomaly] == 0, anomaly
    assert counts["replayed"] == recovery_drill.REPLAYS
    assert counts["span"] <= recovery_drill.LOSS_BOUND
    assert 0 < counts["serving"] <= recovery_drill.SERVING_BOUND
    assert recovery_drill.passed(counts)
    assert re.fullmatch(
        rf"recovery-drill: acknowledged {counts['acknowledged']}; before the mistake: "
        r"missing 0, changed 0, extra 0, ids reused 0; every data node lost: lost \d+ "
        r"acknowledged of the last \d+\.\d s \(archive_timeout 30 s\), serving again "
        r"after \d+\.\d s",
        lines[-1],
    )
    assert hosts.leftovers() == []
    assert disks.leftovers() == []
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"])
            if str(root) in " ".join(p.info["cmdline"] or [])]  # fmt: skip
    assert left == []


def test_the_drill_fails_on_a_missing_animal_or_a_loss_past_the_bound() -> None:
    """:func:`recovery_drill.passed` is what the exit status says: clean counts pass,
    one anomaly or a bound crossed fails."""
    clean = {"missing": 0, "changed": 0, "extra": 0, "reused": 0, "span": 35.0,
             "serving": 40.0}  # fmt: skip
    assert recovery_drill.passed(clean)
    for name, value in (("missing", 1), ("changed", 1), ("extra", 1), ("reused", 1),
                        ("span", 61.0), ("serving", 601.0)):  # fmt: skip
        assert not recovery_drill.passed({**clean, name: value}), name
