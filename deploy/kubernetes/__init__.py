"""The Kubernetes manifests (base and overlays) and their check, ``make kubernetes-check``."""
