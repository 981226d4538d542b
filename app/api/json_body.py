"""A JSON body is read before webargs sees it: malformed JSON (a truncated body, a trailing comma,
invalid UTF-8) is 400 `malformed_json`, and a body nested deeper than api.max_json_depth is 400
`json_too_deep`, never a 500 (json.loads raises RecursionError near a depth of 1,000)."""

from __future__ import annotations

import json
import re

_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"')
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in a JSON text, strings aside; linear, no recursion."""
    depth = deepest = 0
    for byte in _STRINGS.sub(b'""', raw).translate(None, _NOT_BRACKETS):
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def body_problem(raw: bytes, max_depth: int) -> tuple[str, str] | None:
    """Why a JSON body cannot be read, as (reason, detail), or None when it is well-formed JSON. The detail is
    the parser's own message (a position, never the body's content)."""
    if nesting_depth(raw) > max_depth:
        return "json_too_deep", "The JSON body is nested too deeply (api.max_json_depth)."
    try:
        json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return "malformed_json", f"The body is not valid UTF-8 (at byte {exc.start})."
    except json.JSONDecodeError as exc:
        return "malformed_json", f"The body is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})."
    except RecursionError:
        return "json_too_deep", "The JSON body is nested too deeply (api.max_json_depth)."
    return None
