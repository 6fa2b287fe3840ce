"""The Prometheus rules of deploy/prometheus (issue: the operator's kit): promtool
accepts them, every alert is tested firing and not firing, and every alert tells the
on-call person how bad it is, what happened and where the runbook is."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import ROOT

RULES = ROOT / "deploy" / "prometheus"
RUNBOOKS = ROOT / "docs" / "operations" / "monitor.md"
#: The promtool unit test files (the three-day alert's evaluates less often).
TEST_FILES = (
    "alerts_test.yml",
    "alerts_ticket_test.yml",
    "backups_test.yml",
    "certificates_test.yml",
)
#: The alerting rules: the service's, WAL archiving's and backups' (D28), and the
#: certificates'.
ALERT_FILES = ("alerts.yml", "backups.yml", "certificates.yml")


def promtool(*args: str, cwd: Path = RULES) -> subprocess.CompletedProcess[str]:
    """Run Debian's promtool (``make test`` installs the prometheus package)."""
    executable = shutil.which("promtool")
    assert executable, "promtool not found: install Debian's prometheus package (make test does)"
    return subprocess.run(
        [executable, *args], cwd=cwd, capture_output=True, text=True, timeout=300, check=False
    )


def alerts() -> list[dict[str, Any]]:
    """Every alerting rule of :data:`ALERT_FILES`."""
    groups = [
        group
        for name in ALERT_FILES
        for group in yaml.safe_load((RULES / name).read_text())["groups"]
    ]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def test_promtool_accepts_the_recording_rules_and_the_alerts() -> None:
    result = promtool("check", "rules", "rules.yml", *ALERT_FILES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_alert_passes_its_promtool_unit_tests() -> None:
    result = promtool("test", "rules", *TEST_FILES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("SUCCESS") == len(TEST_FILES)


def test_there_are_at_least_eight_alerts_each_tested_firing_and_not_firing() -> None:
    names = [rule["alert"] for rule in alerts()]
    assert len(names) >= 8
    assert len(set(names)) == len(names)
    firing: set[str] = set()
    quiet: set[str] = set()
    cases = [
        case for name in TEST_FILES for case in yaml.safe_load((RULES / name).read_text())["tests"]
    ]
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (firing if check["exp_alerts"] else quiet).add(check["alertname"])
    assert set(names) - firing == set(), "alerts never tested firing"
    assert set(names) - quiet == set(), "alerts never tested quiet"


def test_the_unit_tests_fail_when_an_alert_stops_firing(tmp_path: Path) -> None:
    """The promtool tests can fail: with one alert's threshold out of reach, its
    firing case does."""
    for name in ("rules.yml", "alerts_test.yml"):
        shutil.copy(RULES / name, tmp_path / name)
    text = (RULES / "alerts.yml").read_text()
    broken = text.replace(
        "petstore_rate_limit_failing_open == 1", "petstore_rate_limit_failing_open == 2"
    )
    assert broken != text
    (tmp_path / "alerts.yml").write_text(broken)
    result = promtool("test", "rules", "alerts_test.yml", cwd=tmp_path)
    assert result.returncode != 0
    assert "PetstoreRateLimitFailingOpen" in result.stdout + result.stderr


@pytest.mark.parametrize("rule", alerts(), ids=lambda rule: rule["alert"])
def test_an_alert_has_a_severity_a_summary_a_description_and_a_runbook(
    rule: dict[str, Any],
) -> None:
    assert rule["labels"]["severity"] in {"critical", "warning", "info"}
    annotations = rule["annotations"]
    assert annotations["summary"].strip()
    assert annotations["description"].strip()
    assert annotations["runbook_url"] == f"docs/operations/monitor.md#{rule['alert'].lower()}"


def test_every_runbook_link_names_a_section_of_the_operations_guide() -> None:
    headings = re.findall(r"^#{2,4} (.+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    anchors = {
        re.sub(r"[^a-z0-9 _-]", "", heading.lower()).replace(" ", "-") for heading in headings
    }
    for rule in alerts():
        anchor = rule["annotations"]["runbook_url"].split("#", 1)[1]
        assert anchor in anchors, f"{rule['alert']}: no section #{anchor} in {RUNBOOKS.name}"


def test_the_blackbox_modules_load_and_each_verifies_the_server_against_a_ca() -> None:
    """The exporter accepts blackbox.yml as it is (unknown or deprecated keys would
    refuse or warn), and no module trusts a server without checking its
    certificate: each names the deployment's CA and none skips verification."""
    exporter = shutil.which("prometheus-blackbox-exporter")
    assert exporter, "install Debian's prometheus-blackbox-exporter (make test does)"
    checked = subprocess.run(
        [exporter, f"--config.file={RULES / 'blackbox.yml'}", "--config.check"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert "level=warn" not in checked.stderr, checked.stderr
    modules = yaml.safe_load((RULES / "blackbox.yml").read_text())["modules"]
    for name, module in modules.items():
        tls = module[module["prober"]]["tls_config"]
        assert tls["ca_file"] == "/etc/prometheus/tls/ca.crt", name
        assert not tls.get("insecure_skip_verify", False), name
    (job,) = yaml.safe_load((RULES / "certificates-scrape.yml").read_text())["scrape_configs"]
    named = {group["labels"]["module"] for group in job["static_configs"]}
    assert named == set(modules)


def test_promtool_accepts_a_configuration_with_the_certificates_scrape_job(
    tmp_path: Path,
) -> None:
    scrape = yaml.safe_load((RULES / "certificates-scrape.yml").read_text())
    config = {"rule_files": [str(RULES / "certificates.yml")], **scrape}
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    result = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert result.returncode == 0, result.stdout + result.stderr
