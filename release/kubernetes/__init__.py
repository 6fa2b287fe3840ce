"""``make kubernetes-check``: the manifests of deploy/kubernetes as an operator applies
them, checked offline, and the ``local`` overlay run.

    python -m release.kubernetes        # render, validate, scan, pin, run
    python -m release.kubernetes pin    # write the image's digest into the overlays

1. ``kubectl kustomize`` renders every overlay;
2. ``kubernetes-validate --strict`` validates every object against the schemas of each
   Kubernetes version of :data:`KUBERNETES_VERSIONS` (they ship inside the package);
3. the probes ask ``/healthz`` (liveness, startup) and ``/readyz`` (readiness), and
   the grace period is longer than ``PETSTORE_SHUTDOWN_TIMEOUT_SECONDS``; production
   and staging reach PostgreSQL with ``sslmode=verify-full`` and Redis with
   ``rediss://``, each against the CA of a Secret mounted read-only;
4. ``checkov --framework kubernetes`` finds no failed check (a skipped one carries
   its reason in a ``checkov.io/skipN`` annotation);
5. production and staging pin the digest of the image ``make image`` built from this
   tree (``pin`` writes it; the digest stays when a commit leaves the image's sources
   alone, release/image/sources.py);
6. ``podman kube play`` runs the ``local`` overlay with the image: ``/readyz`` 200, an
   API key made in the pod, a createPet 201 and a getPet of it; the stop (SIGTERM)
   drains and the container exits 0; ``podman kube down`` removes the pod. The pod,
   its containers and its volumes are removed whatever happens.

The checkers come from ``.tools/k8s-venv`` (``make test-prerequisites``), kubectl from
the machine; nothing needs the network. Under ``podman kube play`` the pod shares
the host's network (CI has only loopback) on free loopback ports, under names of
its own: what :func:`playable` changes in the rendered ``local`` overlay, and
nothing else.
"""
