"""The redaction of stored events (D6) as SQL, built from the rule's own constants (app.domain.redaction), so
that the mark redacts in the statement that marks and no payload travels to Python and back. A
property test holds the two to the same answers (tests/integration/test_redaction_sql.py)."""

from __future__ import annotations

from app.domain.redaction import KEPT, REDACTABLE


def redactable(alias: str) -> str:
    """A condition true for a stored event the rule can redact: a known type and version, a payload with a
    file object that has every member redaction keeps (none of them null). Else the rule raises."""
    kinds = " OR ".join(
        f"({alias}.type = '{event_type}' AND {alias}.schema_version = {version})"
        for event_type, version in sorted(REDACTABLE)
    )
    source = f"({alias}.payload -> 'file')"
    kept = " AND ".join(f"coalesce(jsonb_typeof({source} -> '{name}'), 'null') <> 'null'" for name in KEPT)
    return f"(({kinds}) AND coalesce(jsonb_typeof({source}), '') = 'object' AND {kept})"


def redacted_payload(alias: str, blanked_param: str) -> str:
    """The redacted payload of a redactable event: the kept members, then the blanked ones (a parameter
    holding BLANKED as JSON), under `file`."""
    source = f"({alias}.payload -> 'file')"
    kept = ", ".join(f"'{name}', {source} -> '{name}'" for name in KEPT)
    return f"jsonb_build_object('file', jsonb_build_object({kept}) || %({blanked_param})s::jsonb)"
