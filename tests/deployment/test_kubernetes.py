"""deploy/kubernetes (issue 44): what ``make kubernetes-check`` tells an operator when the
manifests go wrong. The whole check (checkov, kubernetes-validate, podman kube play)
runs as ``make kubernetes-check``, a prerequisite of ``make test``; these tests pin
its verdicts on a broken copy of the overlays, with kubectl only."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from release.kubernetes import manifests

DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def overlays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of deploy/kubernetes that the check reads instead of the repository's."""
    copy = tmp_path / "kubernetes"
    shutil.copytree(manifests.HERE, copy)
    monkeypatch.setattr(manifests, "HERE", copy)
    return copy


def test_every_overlay_renders_its_namespace_and_production_runs_the_image_by_digest(
    tmp_path: Path,
) -> None:
    files = manifests.render(tmp_path)
    images = {}
    for overlay, path in files.items():
        documents = list(yaml.safe_load_all(path.read_text()))
        # Every object in the overlay's namespace, and the Namespace itself.
        namespaces = {
            doc["metadata"].get("namespace", doc["metadata"]["name"]) for doc in documents
        }
        assert namespaces == {{"production": "petstore"}.get(overlay, f"petstore-{overlay}")}
        (deployment,) = (doc for doc in documents if doc["kind"] == "Deployment")
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        images[overlay] = container["image"]
    assert images["production"] == f"localhost/petstore@{manifests.pinned('production')}"
    assert images["staging"] == images["production"]
    assert images["local"] == "localhost/petstore:1.0.0"


def test_a_pin_other_than_the_image_of_the_tree_fails_naming_both_digests(
    overlays: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(manifests, "image_digest", lambda: DIGEST)
    with pytest.raises(
        manifests.CheckError, match=f"pins {manifests.pinned('production')}.*{DIGEST}"
    ):
        manifests.check_pins()

    manifests.pin()
    manifests.check_pins()
    assert manifests.pinned("production") == manifests.pinned("staging") == DIGEST


def test_a_grace_period_not_longer_than_the_shutdown_timeout_fails(
    overlays: Path, tmp_path: Path
) -> None:
    settings = overlays / "base" / "kustomization.yaml"
    text = settings.read_text()
    settings.write_text(text.replace("SHUTDOWN_TIMEOUT_SECONDS=30", "SHUTDOWN_TIMEOUT_SECONDS=40"))
    files = manifests.render(tmp_path)
    with pytest.raises(manifests.CheckError, match="terminationGracePeriodSeconds 35"):
        manifests.check_stop_and_probes(files)


def test_a_liveness_probe_on_readyz_fails(overlays: Path, tmp_path: Path) -> None:
    deployment = overlays / "base" / "deployment.yaml"
    text = deployment.read_text()
    liveness = text.index("livenessProbe:")
    deployment.write_text(text[:liveness] + text[liveness:].replace("/healthz", "/readyz", 1))
    files = manifests.render(tmp_path)
    with pytest.raises(manifests.CheckError, match="'livenessProbe': '/readyz'"):
        manifests.check_stop_and_probes(files)
