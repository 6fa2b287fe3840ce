"""deploy/kubernetes (issue 44): what ``make kubernetes-check`` tells an operator when the
manifests go wrong. The whole check (checkov, kubernetes-validate, podman kube play)
runs as ``make kubernetes-check``, a prerequisite of ``make test``; these tests pin
its verdicts on a broken copy of the overlays, with kubectl only."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

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


def _workloads(path: Path) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The settings (the ConfigMap's data) and the Deployment and Job of a rendered
    overlay, by kind."""
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    (settings,) = (doc["data"] for doc in documents if doc["kind"] == "ConfigMap")
    return settings, {doc["kind"]: doc for doc in documents if doc["kind"] in ("Deployment", "Job")}


def test_production_and_staging_verify_postgres_and_redis_against_the_mounted_ca(
    tmp_path: Path,
) -> None:
    files = manifests.render(tmp_path)
    manifests.check_tls(files)
    for overlay in ("production", "staging"):
        settings, workloads = _workloads(files[overlay])
        database = settings["PETSTORE_DATABASE_URL"]
        assert database.startswith("postgresql://petstore@")  # the password is PGPASSWORD
        assert "&sslmode=verify-full&sslrootcert=/run/secrets/petstore-ca/ca.crt" in database
        for kind, workload in workloads.items():
            pod = workload["spec"]["template"]["spec"]
            (container,) = pod["containers"]
            assert {"name": "ca", "mountPath": "/run/secrets/petstore-ca", "readOnly": True} in (
                container["volumeMounts"]
            ), kind
            assert {
                "name": "ca",
                "secret": {"secretName": "petstore-ca", "defaultMode": 0o444},
            } in (pod["volumes"]), kind
            env = {var["name"]: var for var in container["env"]}
            assert env["PGPASSWORD"]["valueFrom"]["secretKeyRef"]["name"] == "petstore-secrets"
        (container,) = workloads["Deployment"]["spec"]["template"]["spec"]["containers"]
        redis = {var["name"]: var.get("value") for var in container["env"]}["PETSTORE_REDIS_URL"]
        assert redis == (
            "rediss://:$(REDIS_PASSWORD)@$(REDIS_ADDRESS)/0"
            "?ssl_ca_certs=/run/secrets/petstore-ca/ca.crt"
        )
        assert settings["REDIS_ADDRESS"].endswith(":6379")
    # The local overlay, on the image's SQLite and without Redis, needs none of it.
    local_settings, local = _workloads(files["local"])
    (container,) = local["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert "env" not in container
    assert "PETSTORE_DATABASE_URL" not in local_settings


@pytest.mark.parametrize(
    ("path", "old", "new", "refusal"),
    [
        (
            "overlays/staging/kustomization.yaml",
            "sslmode=verify-full",
            "sslmode=require",
            "overlays/staging: the Deployment petstore: PETSTORE_DATABASE_URL lacks "
            "sslmode=verify-full",
        ),
        (
            "overlays/production/kustomization.yaml",
            "&sslrootcert=/run/secrets/petstore-ca/ca.crt",
            "",
            r"overlays/production: the Deployment petstore: no file is named by sslrootcert",
        ),
        (
            "components/tls/deployment.yaml",
            "value: rediss://",
            "value: redis://",
            "PETSTORE_REDIS_URL is not rediss:// with the server verified",
        ),
        (
            "components/tls/deployment.yaml",
            "?ssl_ca_certs=",
            "?ssl_cert_reqs=none&ssl_ca_certs=",
            "PETSTORE_REDIS_URL is not rediss:// with the server verified",
        ),
        (
            "components/tls/migration-job.yaml",
            "mountPath: /run/secrets/petstore-ca",
            "mountPath: /run/secrets/elsewhere",
            "the Job petstore-migrate: sslrootcert=/run/secrets/petstore-ca/ca.crt is not mounted",
        ),
        (
            "components/tls/deployment.yaml",
            "readOnly: true",
            "readOnly: false",
            "the Deployment petstore: sslrootcert=.* is not in a Secret mounted read-only",
        ),
        (
            "components/tls/deployment.yaml",
            "- name: PETSTORE_TLS_CERTIFICATE",
            "- name: PETSTORE_TLS_CERTIFICATE_UNREAD",
            "the Deployment petstore: no file is named by PETSTORE_TLS_CERTIFICATE",
        ),
        (
            "components/tls/deployment.yaml",
            "scheme: HTTPS",
            "scheme: HTTP",
            "the Deployment petstore: a probe is not HTTPS, while the pod serves TLS",
        ),
    ],
    ids=[
        "require",
        "no-ca",
        "redis-in-clear",
        "redis-unverified",
        "ca-elsewhere",
        "ca-not-a-secret",
        "pod-in-clear",
        "probe-in-clear",
    ],
)
def test_an_overlay_that_does_not_verify_the_servers_fails_naming_it(
    overlays: Path, tmp_path: Path, path: str, old: str, new: str, refusal: str
) -> None:
    changed = overlays / path
    text = changed.read_text()
    assert old in text
    changed.write_text(text.replace(old, new))
    files = manifests.render(tmp_path)
    with pytest.raises(manifests.CheckError, match=refusal):
        manifests.check_tls(files)
