"""Generate docs/configuration.md from the configuration schema (`make docs`); a test keeps it current."""

from __future__ import annotations

from app.platform.config import KEYS, describe_default


def configuration_markdown() -> str:
    lines = [
        "# Configuration reference",
        "",
        "Generated from `app/platform/config/tree.py` (each key declared on its section) by `make docs`; do not edit by hand (a test fails when it is stale).",
        "",
        "Every key can be set in the TOML file named by `LETHE_CONFIG` (`[file]` table, `gc_batch_size = 500`)",
        "or by its environment variable, which wins. Durations are written `90s`, `15m`, `24h`, `7d`; sizes as",
        "bytes or `8MiB`, `1GiB`. A bad value makes `lethe config check` and every role exit with status 2,",
        "naming the key and never the value. Keys marked secret belong in a Kubernetes Secret.",
        "",
        "| key | environment variable | type | default | secret | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for key in KEYS:
        default = describe_default(key)
        default = f"`{default}`" if default != "" else "(empty)"
        lines.append(
            f"| `{key.name}` | `{key.env}` | {key.type_name} | {default} | "
            f"{'yes' if key.secret else ''} | {key.description} |"
        )
    lines += [
        "",
        "Cross-checks:",
        "",
        "- `file.gc_interval` must be shorter than `privacy.object_delete_delay` (the catch-up of the cleanup",
        "  must run inside the delay it guarantees, D8 d).",
        "- With `file.storage.driver = s3`, `file.s3.endpoint` and `file.s3.bucket` are required and",
        "  `file.part_size` must be at least 5MiB.",
        "- The roles api, worker, scheduler and migrate need `database.url`; api, worker and scheduler need",
        "  `broker.url`.",
        "  Only `lethe dev` runs without them (embedded PostgreSQL, in-process broker).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(configuration_markdown(), end="")
