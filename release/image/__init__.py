"""The OCI image's build, ``python -m release.image`` (``make image``): its steps, one
module each (base, lock, install, oci, sources); the module ``__main__`` tells how
they fit."""
