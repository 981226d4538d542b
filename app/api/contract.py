"""The OpenAPI document as this installation checks requests: limits that come from its configuration (the largest
upload, the transfers its store takes, the form of a case reference) are stated in the contract, so that a client
generated from /openapi.json never sends what the server refuses for a reason the schema did not say."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.runtime import Runtime

EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"  # the digest of no bytes


def for_installation(spec: dict[str, Any], runtime: Runtime) -> dict[str, Any]:
    """The generated document with this installation's limits added (in place; returned for convenience)."""
    cfg = runtime.cfg
    largest = runtime.limits.max_size
    if cfg.scan.clamd_address:
        largest = min(largest, cfg.scan.max_size)  # a scanner refuses what it cannot take (too_large_to_scan)
    schemas = spec.get("components", {}).get("schemas", {})
    upload = schemas.get("UploadCreate", {}).get("properties", {})
    if "size_bytes" in upload:
        upload["size_bytes"]["maximum"] = largest
    if "sha256" in upload:
        # an empty file's digest is known before its first byte: any other declared one fails its completion
        empty = "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in EMPTY_SHA256)
        schemas["UploadCreate"]["oneOf"] = [
            {"properties": {"size_bytes": {"minimum": 1}}},
            {"properties": {"size_bytes": {"maximum": 0}, "sha256": {"pattern": f"^{empty}$"}}},
        ]
    if "transfer" in upload and (not runtime.store.supports_direct or cfg.file.encryption):
        # direct uploads need an S3 store and files stored as sent (docs/api.md, direct uploads)
        upload["transfer"]["enum"] = [value for value in upload["transfer"].get("enum", []) if value != "direct"]
    for name in ("MessagePut", "DraftPut"):  # too_many_attachments past file.max_attachments
        listed = schemas.get(name, {}).get("properties", {})
        if "file_ids" in listed:
            listed["file_ids"]["maxItems"] = cfg.file.max_attachments
    hold = schemas.get("HoldRequest")
    if hold is not None:
        hold["oneOf"] = [{"required": ["subject_id"]}, {"required": ["file_id"]}]
        hold["properties"]["case_ref"]["pattern"] = cfg.holds.case_ref_pattern
    tus_create = spec.get("paths", {}).get("/api/v1/tus", {}).get("post", {})
    for parameter in tus_create.get("parameters", []):
        if parameter.get("name") == "Upload-Length":
            parameter["schema"]["maximum"] = largest
    return spec
