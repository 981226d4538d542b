# A key of the keyring never reaches a log, a metric, an error or the database: only its id does. A data key
# reaches the database only wrapped, bound to its file and to the id of the key that wrapped it, so that a wrapped
# key copied to another row, or relabelled with another id, does not open.
"""The keyring (file.keyring): the key-encryption keys that wrap every file's data key. The first is current:
new data keys are wrapped by it, and `lethe keys rotate` wraps the others' again by it. Removing a key makes
every database copy (a backup) whose rows it wrapped useless for the files deleted since."""

from __future__ import annotations

import base64
import binascii
import os
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.domain.sealing import Wrapped
from app.errors import KeyMismatch, KeyUnavailable, WrappedKeyCorrupt

KEY_BYTES = 32
_WRAP_VERSION = 1
_WRAP_AAD = b"lethe data key v1\x00"
KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True)
class KeyringKey:
    """One key-encryption key: its id (stored beside every data key it wraps) and its 32 bytes."""

    id: str
    material: bytes = field(repr=False)

    def __str__(self) -> str:
        return self.id


class KeyringError(ValueError):
    """A keyring that cannot be read: the messages name entries by position and id, never a key."""

    def __init__(self, messages: list[str]):
        super().__init__("; ".join(messages))
        self.messages = messages


def _material(text: str) -> bytes | None:
    """32 bytes from base64 (standard or URL-safe, padded or not), else None."""
    standard = text.replace("-", "+").replace("_", "/")
    try:
        raw = base64.b64decode(standard + "=" * (-len(standard) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == KEY_BYTES else None


def parse_keyring(value: Any) -> tuple[KeyringKey, ...]:
    """The keyring from its configuration: `id:base64,id:base64` (the first is current), or a list of
    `id:base64` strings (a TOML file), or keys already parsed.

    Raises:
        KeyringError: an entry without an id, with a bad id, a repeated id, or a key that is not 32 bytes of
            base64; each message names the entry by its position alone: never its key, nor its id (an entry
            written the wrong way round, key:id, has its key where the id goes).
    """
    if isinstance(value, tuple) and all(isinstance(item, KeyringKey) for item in value):
        return value
    if isinstance(value, str):
        entries = [item.strip() for item in value.split(",") if item.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value):
        entries = [item.strip() for item in value]
    else:
        raise KeyringError(["Must be id:key entries separated by commas (a key is 32 random bytes in base64)."])
    keys: list[KeyringKey] = []
    errors: list[str] = []
    for position, entry in enumerate(entries, start=1):
        key_id, colon, text = entry.partition(":")
        key_id = key_id.strip()
        if not colon or not KEY_ID.fullmatch(key_id):
            errors.append(f"Entry {position}: must be id:key, the id of 1 to 64 letters, digits, '.', '_' or '-'.")
            continue
        material = _material(text.strip())
        if material is None:
            errors.append(
                f"Entry {position}: the key must be 32 bytes in base64, after the id and a colon (lethe "
                "keys generate makes one)."
            )
            continue
        if any(key.id == key_id for key in keys):
            errors.append(f"Entry {position}: its id is the id of an entry before it.")
            continue
        keys.append(KeyringKey(key_id, material))
    if errors:
        raise KeyringError(errors)
    return tuple(keys)


def generate_entry(key_id: str) -> str:
    """A new keyring entry, `id:base64`, of 32 random bytes."""
    if not KEY_ID.fullmatch(key_id):
        raise ValueError("a key id is 1 to 64 letters, digits, '.', '_' or '-'")
    return f"{key_id}:{base64.b64encode(os.urandom(KEY_BYTES)).decode()}"


class Keyring:
    """The keys of file.keyring, the first current."""

    def __init__(self, keys: Sequence[KeyringKey]):
        self._keys = {key.id: key for key in keys}
        self.current: KeyringKey | None = keys[0] if keys else None
        self._proven: set[str] = set()  # ids whose key has opened a data key here: it is the key that wrapped them

    def __repr__(self) -> str:
        return f"Keyring(ids={list(self._keys)})"

    @property
    def ids(self) -> list[str]:
        """The key ids, the current first."""
        return list(self._keys)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def new_data_key(self, file_id: uuid.UUID) -> tuple[bytes, Wrapped]:
        """A fresh random data key for a file, and its wrapping by the current key."""
        data_key = os.urandom(KEY_BYTES)
        return data_key, self.wrap(file_id, data_key)

    def wrap(self, file_id: uuid.UUID, data_key: bytes) -> Wrapped:
        """Wrap a file's data key by the current key (AES-256-GCM, bound to the file and the key id)."""
        if self.current is None:
            raise KeyUnavailable("(none: the keyring is empty)")
        nonce = os.urandom(12)
        sealed = AESGCM(self.current.material).encrypt(nonce, data_key, _aad(file_id, self.current.id))
        return Wrapped(self.current.id, bytes([_WRAP_VERSION]) + nonce + sealed)

    def unwrap(self, file_id: uuid.UUID, wrapped: Wrapped) -> bytes:
        """A file's data key from its row.

        Raises:
            KeyUnavailable: the keyring holds no key of that id.
            KeyMismatch: the keyring's key of that id does not open it, and has opened no other data key in this
                process yet: another key may stand under that id (a keyring made again), a configuration fault
                that never ends a file.
            WrappedKeyCorrupt: the key of that id has opened other files' data keys here, and does not open this
                one: the row's wrapped key was altered or copied from another row (502, as content that does not
                open; roles start only once each id's key opens some of its files, see app/entry/support.py).
        """
        key = self._keys.get(wrapped.key_id)
        if key is None:
            raise KeyUnavailable(wrapped.key_id)
        blob = wrapped.wrapped
        try:
            if len(blob) != 1 + 12 + KEY_BYTES + 16 or blob[0] != _WRAP_VERSION:
                raise InvalidTag()
            data_key = AESGCM(key.material).decrypt(blob[1:13], blob[13:], _aad(file_id, wrapped.key_id))
        except InvalidTag:
            if wrapped.key_id in self._proven:
                raise WrappedKeyCorrupt() from None
            raise KeyMismatch(wrapped.key_id) from None
        self._proven.add(wrapped.key_id)
        return data_key

    def rewrap(self, file_id: uuid.UUID, wrapped: Wrapped) -> Wrapped:
        """The same data key, wrapped by the current key (rotation)."""
        return self.wrap(file_id, self.unwrap(file_id, wrapped))


def _aad(file_id: uuid.UUID, key_id: str) -> bytes:
    return _WRAP_AAD + file_id.bytes + key_id.encode()
