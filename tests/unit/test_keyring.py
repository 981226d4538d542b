"""The keyring (app/platform/keys.py) and its configuration key: data keys wrapped bound to their file and key id,
rotation without touching the data key, and errors that name entries and ids, never a key."""

from __future__ import annotations

import base64
import os
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.sealing import Wrapped
from app.errors import ConfigError, ContentCorrupt, KeyMismatch, KeyUnavailable, WrappedKeyCorrupt
from app.lifecycle.keys import missing_key_ids
from app.platform import config
from app.platform.keys import Keyring, KeyringError, generate_entry, parse_keyring

FILE = uuid.UUID("0b7e52f1-0000-4000-8000-000000000001")


def material(entry: str) -> str:
    return entry.split(":", 1)[1]


def test_a_keyring_parses_with_its_first_key_current():
    ring = Keyring(parse_keyring(f"{generate_entry('k2')}, {generate_entry('k1')}"))
    assert ring.ids == ["k2", "k1"] and ring.current is not None and ring.current.id == "k2"
    assert "k1" in ring and "k3" not in ring
    toml_list = parse_keyring([generate_entry("a"), generate_entry("b")])
    assert [key.id for key in toml_list] == ["a", "b"]
    urlsafe = "k:" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
    assert parse_keyring(urlsafe)[0].id == "k"


def test_bad_entries_are_named_by_position_never_by_key():
    secret = material(generate_entry("x"))
    short = base64.b64encode(b"s" * 16).decode()
    with pytest.raises(KeyringError) as caught:
        parse_keyring(f"k1:{short},{secret},k1:{secret},k1:{secret},bad id:{secret}")
    text = " ".join(caught.value.messages)
    assert "Entry 1: the key must be 32 bytes" in text and "Entry 2:" in text
    assert "Entry 4: its id is the id of an entry before it" in text and "Entry 5:" in text
    assert secret not in text and short not in text


def test_an_entry_written_the_wrong_way_round_does_not_show_its_key():
    # URL-safe base64 without padding is a valid id: key:id puts the key where the id goes
    for secret in (
        base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="),
        base64.b64encode(os.urandom(32)).decode(),
    ):
        with pytest.raises(KeyringError) as caught:
            parse_keyring(f"{secret}:2027-01")
        assert secret not in " ".join(caught.value.messages) and secret[:12] not in " ".join(caught.value.messages)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=120))
def test_no_input_is_echoed_by_its_error(text):
    try:
        parse_keyring(text)
    except KeyringError as exc:
        for piece in text.replace(",", ":").split(":"):
            if len(piece.strip()) >= 8:
                assert piece.strip() not in " ".join(exc.messages)


def test_the_configuration_needs_a_keyring_with_encryption_on():
    with pytest.raises(ConfigError) as caught:
        config.load({"LETHE_FILE_ENCRYPTION": "on"})
    assert list(caught.value.errors) == ["file.keyring"]
    entry = generate_entry("k1")
    cfg = config.load({"LETHE_FILE_ENCRYPTION": "on", "LETHE_FILE_KEYRING": entry})
    assert cfg.file.encryption is True and cfg.file.keyring[0].id == "k1"
    assert config.with_changes(cfg, {"file.gc_batch_size": 7}).file.keyring == cfg.file.keyring
    assert config.load({"LETHE_FILE_ENCRYPTION": "off"}).file.encryption is False
    assert config.KEYS_BY_NAME["file.keyring"].secret
    assert material(entry) not in repr(cfg)
    with pytest.raises(ConfigError) as caught:
        config.load({"LETHE_FILE_KEYRING": "k1:" + material(entry)[:20]})
    assert material(entry)[:20] not in str(caught.value)


def test_a_data_key_opens_only_for_its_file_and_key_id():
    entry = generate_entry("k1")
    ring = Keyring(parse_keyring(entry))
    data_key, wrapped = ring.new_data_key(FILE)
    fresh = Keyring(parse_keyring(entry))  # has opened nothing yet: a key that does not open may be the wrong key
    with pytest.raises(KeyMismatch):
        fresh.unwrap(uuid.uuid4(), wrapped)  # copied to another file's row
    assert ring.unwrap(FILE, wrapped) == data_key and len(data_key) == 32
    another = Keyring(parse_keyring(f"k2:{material(generate_entry('x'))},k1:{material(generate_entry('y'))}"))
    with pytest.raises(KeyMismatch):
        another.unwrap(FILE, wrapped)  # another key under the same id
    # the same key under another id: the id is bound too, so a row relabelled to another id does not open
    same = Keyring(parse_keyring(f"k1:{material(entry)},k7:{material(entry)}"))
    assert same.unwrap(FILE, wrapped) == data_key
    with pytest.raises(KeyMismatch):
        same.unwrap(FILE, Wrapped("k7", wrapped.wrapped))
    with pytest.raises(KeyUnavailable) as missing:
        Keyring(parse_keyring(generate_entry("k9"))).unwrap(FILE, wrapped)
    assert missing.value.key_id == "k1" and not isinstance(missing.value, KeyMismatch)
    # a key that does not open, and has opened nothing here, is the configuration's trouble (503), never content
    # that does not open (502)
    assert not issubclass(KeyMismatch, ContentCorrupt) and KeyMismatch.status == 503


def test_a_wrapped_key_its_proven_key_does_not_open_is_that_rows_corruption():
    """Once the key of an id has opened a data key, it is the key that wrapped them: a row of that id it does not
    open was altered, cut, or copied from another row (502 content_corrupt), whatever the id's other rows."""
    entry = generate_entry("k1")
    ring = Keyring(parse_keyring(entry))
    data_key, wrapped = ring.new_data_key(FILE)
    assert ring.unwrap(FILE, wrapped) == data_key
    for altered in (
        wrapped.wrapped[:-1] + bytes([wrapped.wrapped[-1] ^ 1]),
        wrapped.wrapped[:-1],
        bytes([9]) + wrapped.wrapped[1:],
        b"",
    ):
        with pytest.raises(WrappedKeyCorrupt) as caught:
            ring.unwrap(FILE, Wrapped("k1", altered))
        assert caught.value.status == 502 and caught.value.reason == "content_corrupt"
        assert material(entry) not in str(caught.value) and str(FILE) not in str(caught.value)
    with pytest.raises(WrappedKeyCorrupt):
        ring.unwrap(uuid.uuid4(), wrapped)  # another row's key, copied
    other = Keyring(parse_keyring(f"k2:{material(generate_entry('x'))},{entry}"))
    _, of_k2 = other.new_data_key(FILE)
    with pytest.raises(KeyMismatch):  # k2 has opened nothing here: each id is proven by its own key alone
        other.unwrap(uuid.uuid4(), of_k2)
    assert ring.unwrap(FILE, wrapped) == data_key  # the good row still opens


def test_rotation_wraps_the_same_data_key_by_the_current_key():
    old, new = generate_entry("k1"), generate_entry("k2")
    data_key, wrapped = Keyring(parse_keyring(old)).new_data_key(FILE)
    rotated = Keyring(parse_keyring(f"{new},{old}"))
    again = rotated.rewrap(FILE, wrapped)
    assert again.key_id == "k2" and again.wrapped != wrapped.wrapped
    assert rotated.unwrap(FILE, again) == data_key
    retired = Keyring(parse_keyring(new))  # k1 left the keyring after the rotation
    assert retired.unwrap(FILE, again) == data_key
    with pytest.raises(KeyUnavailable):
        retired.unwrap(FILE, wrapped)  # what a backup from before the rotation holds opens no more


def test_missing_key_ids_are_those_live_files_need_and_the_keyring_lacks():
    ring = Keyring(parse_keyring(f"{generate_entry('k2')},{generate_entry('k1')}"))
    assert missing_key_ids(["k0", "k1", "k2", "k9"], ring) == ["k0", "k9"]
    assert missing_key_ids([], ring) == []


def test_no_key_shows_in_a_repr():
    entry = generate_entry("k1")
    ring = Keyring(parse_keyring(entry))
    _, wrapped = ring.new_data_key(FILE)
    for shown in (repr(ring), repr(parse_keyring(entry)), repr(wrapped), str(parse_keyring(entry)[0])):
        assert material(entry) not in shown and base64.b64decode(material(entry)).hex() not in shown
