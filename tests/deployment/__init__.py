"""What ``deploy/`` ships: HAProxy, the image, the Kubernetes manifests, the systemd
unit, the alerts and backups."""
