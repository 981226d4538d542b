"""The suite's keyring: every Lethe the suite runs seals its files (file.encryption on), as a new installation
does. Its keys are derived from fixed words: they protect nothing but test files."""

from __future__ import annotations

import base64
import hashlib


def keyring_entry(key_id: str) -> str:
    """A keyring entry `id:base64` whose key is derived from its id (the same in every process of a run)."""
    material = hashlib.sha256(f"lethe test keyring {key_id}".encode()).digest()
    return f"{key_id}:{base64.b64encode(material).decode()}"


TEST_KEYRING = keyring_entry("test-1")
SEALED_ENV = {"LETHE_FILE_ENCRYPTION": "on", "LETHE_FILE_KEYRING": TEST_KEYRING}
