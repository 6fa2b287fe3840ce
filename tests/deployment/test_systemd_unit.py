"""deploy/systemd/petstore.service (issue: the operator's kit): systemd accepts it, rates
it hardened, and stops the service the way its graceful shutdown needs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

from petstore.server.config import Settings
from tests import ROOT

UNIT = ROOT / "deploy" / "systemd" / "petstore.service"


def systemd_analyze() -> str:
    executable = shutil.which("systemd-analyze")
    assert executable, "systemd-analyze not found: install Debian's systemd package"
    return executable


def service_section() -> dict[str, list[str]]:
    """The [Service] settings, each with every value it is given."""
    settings: dict[str, list[str]] = {}
    section = None
    for line in UNIT.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            settings.setdefault(key, []).append(value)
    return settings


def test_systemd_analyze_verify_accepts_the_unit() -> None:
    """Verified as installed: ``/opt/petstore/bin/petstore`` exists (in a mount
    namespace of the test's own, where /opt holds only a link to this checkout's
    ``petstore``), so systemd checks the unit, not the host."""
    petstore = Path(sys.executable).with_name("petstore")
    script = (
        'mount -t tmpfs tmpfs /opt && mkdir -p /opt/petstore/bin && ln -s "$1" '
        '/opt/petstore/bin/petstore && exec "$2" verify "$3"'
    )
    result = subprocess.run(
        [
            "unshare",
            "--mount",
            "sh",
            "-c",
            script,
            "sh",
            str(petstore),
            systemd_analyze(),
            str(UNIT),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stderr == "", result.stderr


def test_systemd_rates_the_unit_exposure_at_most_2() -> None:
    result = subprocess.run(
        [systemd_analyze(), "security", "--offline=true", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"Overall exposure level for petstore\.service: (\d+\.\d)", result.stdout)
    assert match, result.stdout
    assert float(match.group(1)) <= 2.0, result.stdout


def test_a_stop_signals_the_main_process_and_waits_longer_than_the_shutdown_timeout() -> None:
    """SIGTERM to ``serve`` alone (its workers would stop without the drain), and
    systemd's kill only after the service's own timeout has passed."""
    service = service_section()
    assert service["KillMode"] == ["mixed"]
    assert service["KillSignal"] == ["SIGTERM"]
    default = Settings()
    stop_seconds = int(service["TimeoutStopSec"][0])
    assert stop_seconds > default.shutdown_timeout_seconds > default.shutdown_drain_seconds


def test_secrets_arrive_as_credentials_in_the_settings_directory() -> None:
    service = service_section()
    assert service["LoadCredential"] == ["petstore:/etc/petstore/credentials"]
    assert "PETSTORE_SECRETS_DIR=%d" in service["Environment"]


def test_the_service_runs_as_a_dynamic_user_on_a_read_only_system() -> None:
    service = service_section()
    assert service["DynamicUser"] == ["yes"]
    assert service["ProtectSystem"] == ["strict"]
    assert service["NoNewPrivileges"] == ["yes"]
    assert service["CapabilityBoundingSet"] == [""]
    assert service["StateDirectory"] == ["petstore"]
    assert "PETSTORE_DATABASE_URL=sqlite:////var/lib/petstore/petstore.db" in service["Environment"]


BACKUP_UNITS = (
    "pgbackrest-server.service", "pgbackrest-full.service", "pgbackrest-full.timer",
    "pgbackrest-diff.service", "pgbackrest-diff.timer",
)  # fmt: skip


def test_systemd_analyze_verify_accepts_the_backup_units() -> None:
    """D28's units (deploy/systemd/pgbackrest-*): pgBackRest's TLS server, and a full
    backup weekly and a differential daily from timers that catch up a missed run."""
    folder = UNIT.parent
    result = subprocess.run(
        [systemd_analyze(), "verify", *(str(folder / name) for name in BACKUP_UNITS)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    for kind, calendar in (("full", "Sun *-*-* 01:00:00"), ("diff", "Mon..Sat *-*-* 01:00:00")):
        timer = (folder / f"pgbackrest-{kind}.timer").read_text()
        assert f"OnCalendar={calendar}" in timer
        assert "Persistent=true" in timer
        assert f"--type={kind} backup" in (folder / f"pgbackrest-{kind}.service").read_text()
