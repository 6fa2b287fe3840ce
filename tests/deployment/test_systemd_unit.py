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


def service_section(unit: Path = UNIT) -> dict[str, list[str]]:
    """The [Service] settings of ``unit``, each with every value it is given."""
    settings: dict[str, list[str]] = {}
    section = None
    for line in unit.read_text().splitlines():
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


def exposure(unit: Path) -> float:
    """``systemd-analyze security``'s overall exposure of ``unit`` (0 to 10, lower
    is better), read from the file alone."""
    result = subprocess.run(
        [systemd_analyze(), "security", "--offline=true", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    name = re.escape(unit.name)
    match = re.search(rf"Overall exposure level for {name}: (\d+\.\d)", result.stdout)
    assert match, result.stdout
    return float(match.group(1))


def test_systemd_rates_the_unit_exposure_at_most_2() -> None:
    assert exposure(UNIT) <= 2.0


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


#: The units that run pgBackRest (D28): its TLS server on every host, the backups on
#: the repository host.
PGBACKREST_SERVICES = (
    "pgbackrest-server.service", "pgbackrest-full.service", "pgbackrest-diff.service",
)  # fmt: skip
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


def test_the_pgbackrest_units_are_exposed_no_more_than_the_service() -> None:
    """Issue 59: pgBackRest's TLS server listens on every data node and reads its
    data directory; it and the backups are sandboxed at least as tightly as the
    service's own unit, by ``systemd-analyze security``'s measure."""
    service = exposure(UNIT)
    for name in PGBACKREST_SERVICES:
        assert exposure(UNIT.parent / name) <= service, name


def pgbackrest_global(conf: Path) -> dict[str, str]:
    """The [global] options of a deploy/pgbackrest/ file (the first value of each)."""
    options: dict[str, str] = {}
    section = None
    for line in conf.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "global" and "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            options.setdefault(key, value)
    return options


def test_the_pgbackrest_units_may_write_where_pgbackrest_writes_and_nowhere_else() -> None:
    """Each unit's file system is read-only (ProtectSystem=strict) but for
    ReadWritePaths=, which hold every path deploy/pgbackrest/ makes pgBackRest write:
    the repository, the logs, the spool and the lock and stop files. The lock-path is
    not pgBackRest's default /tmp/pgbackrest, which is private to each unit
    (PrivateTmp=): the locks of the commands run outside a unit would not be seen in
    it."""
    folder = ROOT / "deploy" / "pgbackrest"
    written: list[str] = []
    for conf in (folder / "repository.conf", folder / "node.conf"):
        options = pgbackrest_global(conf)
        assert options["lock-path"] != "/tmp/pgbackrest"
        if "repo1-host" not in options:  # the host that holds the repository
            written.append(options["repo1-path"])
        written += [options.get("log-path", "/var/log/pgbackrest"), options["lock-path"],
                    options.get("spool-path", "/var/spool/pgbackrest")]  # fmt: skip
    for name in PGBACKREST_SERVICES:
        service = service_section(UNIT.parent / name)
        assert service["ProtectSystem"] == ["strict"], name
        assert service["PrivateTmp"] == ["yes"], name
        assert service["User"] == ["postgres"], name
        writable = [Path(path) for paths in service["ReadWritePaths"] for path in paths.split()]
        for path in written:
            assert any(Path(path).is_relative_to(place) for place in writable), (name, path)
