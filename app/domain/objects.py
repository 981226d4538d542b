"""What a file owns in the object store, as one value. Pure: no I/O.

Every key of a file comes from `FileObjects` (built from the key schema of app/domain/keys.py), and every key
read back from a listing is parsed by `parse` alone: nothing else in the code builds or parses a file's keys.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from functools import cached_property

from app.domain.keys import FILES_PREFIX, UPLOADS_PREFIX, VARIANTS, KeySchemaError, original_key, tail_key, variant_key

_ORIGINAL = re.compile(r"^f/([0-9a-f]{2})/([0-9a-f]{2})/([0-9a-f-]{36})/orig-([1-9][0-9]{0,8})$")


@dataclass(frozen=True)
class FileObjects:
    """Everything of one file the store may hold: its originals `orig-1..orig-(r+1)` (r from the stored key;
    r+1 covers an original written but not yet referenced), its variants, the parts of its upload, the tail of
    a tus upload, and the multipart upload of a session that did not complete (S3).

    Raises (on construction):
        KeySchemaError: the stored key is not an original of this file (another file's key, a variant or part key,
            or malformed): nothing must be deleted on the strength of it (K3).
    """

    file_id: uuid.UUID
    object_key: str | None = None  # the stored original, orig-<r>
    upload_id: str | None = None  # the store's multipart upload id (S3), from the session row
    part_count: int = 0
    parts_open: bool = False  # the session did not complete: its parts, or its multipart upload, may remain
    tail: bool = False  # uploaded through tus: uploads/<id>/tail may hold bytes
    sealed: bool = False  # its objects are sealed under its own data key (destroyed once its removal begins)
    store: str = "default"  # the store that holds these objects (file.stores); the keys are the same in every one

    @classmethod
    def of_gone_row(cls, file_id: uuid.UUID, store: str = "default") -> FileObjects:
        """Everything a file whose row is gone may have left in a store: every original its row could have named
        (`orig-1`, and `orig-2` of an image stored again without its metadata) and the rest."""
        return cls(file_id, original_key(file_id, 1), store=store)

    def __post_init__(self) -> None:
        object.__setattr__(self, "file_id", uuid.UUID(str(self.file_id)))
        self.revision  # noqa: B018 - validates the stored key at construction

    @property
    def revision(self) -> int:
        """r of the stored original `orig-<r>`, 0 when none is stored yet."""
        if self.object_key is None:
            return 0
        match = _ORIGINAL.fullmatch(self.object_key)
        if not match or match.group(3) != str(self.file_id):
            raise KeySchemaError("the stored key is not an original of this file")
        if (match.group(1), match.group(2)) != (self.file_id.hex[0:2], self.file_id.hex[2:4]):
            raise KeySchemaError("the stored key's directories do not match the file id")
        return int(match.group(4))

    @cached_property
    def _own_keys(self) -> tuple[str, ...]:
        # The key schema's directory, computed once for every key (a purge builds thousands).
        hex_id = self.file_id.hex
        directory = f"{FILES_PREFIX}{hex_id[0:2]}/{hex_id[2:4]}/{self.file_id}"
        return tuple(
            [f"{directory}/orig-{r}" for r in range(1, self.revision + 2)]
            + [f"{directory}/v-{name}" for name in VARIANTS]
        )

    def object_keys(self, with_tail: bool | None = None) -> list[str]:
        """The keys of the file's objects of its own: originals, variants and (for a tus upload, or with
        `with_tail`) the tail. Parts are the driver's to name (ObjectStore.part_keys)."""
        tail = self.tail if with_tail is None else with_tail
        return list(self._own_keys) + ([tail_key(self.file_id)] if tail else [])

    def variant(self, name: str) -> str:
        """The key of one variant."""
        return variant_key(self.file_id, name)

    @property
    def replaced_originals(self) -> list[str]:
        """The keys of the originals the stored one replaced (`orig-1..orig-(r-1)`): an image stored again without
        its metadata leaves the one it read, which goes as soon as the row references the new one."""
        return list(self._own_keys[: max(self.revision - 1, 0)])

    @property
    def next_original(self) -> str:
        """The key the next original is written to: `orig-1` for a new file, `orig-(r+1)` after `orig-r`."""
        return original_key(self.file_id, self.revision + 1)

    @property
    def tail_key(self) -> str:
        """The key of a tus upload's tail: the bytes received past its last whole part."""
        return tail_key(self.file_id)


def parse(key: str) -> tuple[uuid.UUID, str] | None:
    """The file a key of the schema belongs to and its kind (`original`, `variant`, `part`, `tail`, or
    `other` for a name of the schema's directories Lethe never writes), or None for a key outside the schema
    (`f/<aa>/<bb>/<id>/<name>`, `uploads/<id>/<name>`)."""
    parts = key.split("/")
    try:
        if parts[0] == FILES_PREFIX.rstrip("/") and len(parts) == 5:
            file_id = uuid.UUID(parts[3])
            if str(file_id) != parts[3] or file_id.hex[:2] != parts[1] or file_id.hex[2:4] != parts[2]:
                return None
            name = parts[4]
            kind = (
                "original"
                if re.fullmatch(r"orig-[1-9][0-9]{0,8}", name)
                else "variant"
                if name.startswith("v-") and name[2:] in VARIANTS
                else "other"
            )
            return file_id, kind
        if parts[0] == UPLOADS_PREFIX.rstrip("/") and len(parts) == 3:
            file_id = uuid.UUID(parts[1])
            if str(file_id) != parts[1]:
                return None
            kind = "tail" if parts[2] == "tail" else "part" if re.fullmatch(r"part-[1-9][0-9]*", parts[2]) else "other"
            return file_id, kind
    except ValueError:
        return None
    return None


def owner_of(key: str) -> uuid.UUID | None:
    """The file a key of the schema belongs to, or None."""
    parsed = parse(key)
    return parsed[0] if parsed else None
