"""Sealed links (createFileLink): a token that lets a request without an Authorization header read one file's
bytes, for a few minutes.

A token is the link's facts (file id, variant, disposition, expiry) sealed with AES-GCM under a key derived
from `file.link_secret`: it is bound to those facts (changing one byte breaks the seal) and reveals nothing,
not even the file id. Whether the file may still be read is asked of the database on every use, so a link
of a deleted file answers 404 at once; the seal only says that Lethe made the link and until when.
"""

from __future__ import annotations

import base64
import os
import re
import struct
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VERSION = b"\x01"
_AAD = b"lethe-link-v1"
_DISPOSITIONS = {"attachment": 0, "inline": 1}
_FIXED = struct.Struct(">16sqB")  # file id, expiry (unix seconds), disposition


@dataclass(frozen=True)
class Link:
    """What a link lets its holder read, and until when."""

    file_id: uuid.UUID
    disposition: str  # attachment or inline
    expires_at: datetime
    variant: str | None = None


class BadLink(Exception):
    """Not a token Lethe sealed with this secret (tampered, truncated, or another installation's)."""


class Sealer:
    """Seals and opens link tokens with one secret."""

    def __init__(self, secret: str):
        key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"lethe file links").derive(secret.encode())
        self._aead = AESGCM(key)

    def seal(self, link: Link) -> str:
        fixed = _FIXED.pack(link.file_id.bytes, int(link.expires_at.timestamp()), _DISPOSITIONS[link.disposition])
        nonce = os.urandom(12)
        sealed = self._aead.encrypt(nonce, fixed + (link.variant or "").encode(), _AAD)
        return base64.urlsafe_b64encode(VERSION + nonce + sealed).rstrip(b"=").decode()

    def open(self, token: str) -> Link:
        """The link a token carries (expired or not: the caller compares with its clock).

        Raises:
            BadLink: the token was not sealed by this secret, or is malformed.
        """
        raw = _canonical_bytes(token)
        if len(raw) < 1 + 12 + _FIXED.size + 16 or raw[:1] != VERSION:
            raise BadLink()
        try:
            plain = self._aead.decrypt(raw[1:13], raw[13:], _AAD)
        except InvalidTag:
            raise BadLink() from None
        file_bytes, expires, disposition = _FIXED.unpack(plain[: _FIXED.size])
        names = {code: name for name, code in _DISPOSITIONS.items()}
        if disposition not in names:
            raise BadLink()
        try:
            variant = plain[_FIXED.size :].decode() or None
        except UnicodeDecodeError:
            raise BadLink() from None
        return Link(uuid.UUID(bytes=file_bytes), names[disposition], datetime.fromtimestamp(expires, tz=UTC), variant)


_ALPHABET = re.compile(r"[A-Za-z0-9_-]+")


def _canonical_bytes(token: str) -> bytes:
    """The bytes of a token in its one spelling: unpadded URL-safe base64 that encodes back to itself. The decoder
    alone would skip characters outside its alphabet and ignore the unused bits of the last character, so one link
    would have many URLs.

    Raises:
        BadLink: any other spelling.
    """
    if not _ALPHABET.fullmatch(token):
        raise BadLink()
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except ValueError:
        raise BadLink() from None
    if base64.urlsafe_b64encode(raw).rstrip(b"=").decode() != token:
        raise BadLink()
    return raw
