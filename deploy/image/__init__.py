"""The OCI image of the service: ``Containerfile``, the build (:mod:`deploy.image.build`,
``make image``), its pinned wheels and the podman settings it and its test use."""
