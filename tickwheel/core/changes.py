"""What changed between two JSON documents, as a list of RFC 6902-style operations with the old value kept.

The audit log stores this diff for every change to a job. Objects are compared key by key (recursively);
anything else (lists, numbers, strings) is compared whole, so a changed list is one `replace`.
"""

from __future__ import annotations

from typing import Any

Change = dict[str, Any]


def json_diff(before: Any, after: Any, path: str = "") -> list[Change]:
    """Operations turning `before` into `after`: `add` (value), `remove` (old), `replace` (old, value)."""
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in sorted(set(before) | set(after)):
            here = f"{path}/{pointer_token(key)}"
            if key not in before:
                changes.append({"op": "add", "path": here, "value": after[key]})
            elif key not in after:
                changes.append({"op": "remove", "path": here, "old": before[key]})
            else:
                changes.extend(json_diff(before[key], after[key], here))
        return changes
    if before == after and type(before) is type(after):
        return []
    return [{"op": "replace", "path": path or "/", "old": before, "value": after}]


def pointer_token(key: str) -> str:
    """A key escaped for a JSON Pointer (RFC 6901): `~` -> `~0`, `/` -> `~1`."""
    return str(key).replace("~", "~0").replace("/", "~1")
