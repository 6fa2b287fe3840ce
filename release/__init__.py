"""The release tooling: the OCI image's build (:mod:`release.image`, ``make image``) and
the check of the Kubernetes manifests (:mod:`release.kubernetes`, ``make
kubernetes-check``). What an operator reads or installs stays in ``deploy/image`` and
``deploy/kubernetes``; the code that makes and checks it lives here."""
