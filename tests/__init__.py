"""The test suite, in folders by what they test (the packages, the service as a
process, the deployment, the test bed); docs/contributing.md says which."""

from pathlib import Path

#: The repository's root.
ROOT = Path(__file__).resolve().parent.parent
