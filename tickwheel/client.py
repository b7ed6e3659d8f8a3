"""`tickwheel jobs`, `tickwheel runs JOB_ID`, `tickwheel run RUN_ID`: a terminal view over the public HTTP API."""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

DEMO_KEY_FILE = Path(".stack/demo-api-key")


def add_commands(subparsers: Any) -> None:
    for name, help_text, arg in (
        ("jobs", "list your jobs", None),
        ("runs", "a job's run history, newest first", "job_id"),
        ("run", "one run with its attempts", "run_id"),
    ):
        p = subparsers.add_parser(name, help=help_text)
        if arg:
            p.add_argument(arg)
        p.add_argument("--api-key", help=f"the tenant's API key (default: the demo's, {DEMO_KEY_FILE})")
        p.add_argument("--api", help="the API's base URL (default: http://127.0.0.1:<api port>)")
        p.add_argument("--status", help="runs: only this status")
        p.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    from tickwheel.settings import Settings

    base = args.api or f"http://127.0.0.1:{Settings.from_env().api.port}"
    key = args.api_key or (DEMO_KEY_FILE.read_text().strip() if DEMO_KEY_FILE.exists() else None)
    if not key:
        print("tickwheel: give --api-key (or run `make run` to create the demo tenant)")
        return 2
    path = {
        "jobs": "/v1/jobs",
        "runs": f"/v1/jobs/{getattr(args, 'job_id', '')}/runs" + (f"?status={args.status}" if args.status else ""),
        "run": f"/v1/runs/{getattr(args, 'run_id', '')}",
    }[args.command]
    status, document = _get(base + path, key)
    if status != 200:
        print(f"{status}: {document.get('detail') or document.get('title') or document}")
        return 1
    _print(args.command, document)
    return 0


def _get(url: str, key: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def _print(command: str, document: dict[str, Any]) -> None:
    if command == "run":
        print(json.dumps(document, indent=2))
        return
    for item in document.get("items", []):
        if command == "jobs":
            next_run = item.get("next_run_at") or "-"
            print(f"{item['id']}  {item.get('state', ''):8} next {next_run:32} {item.get('name') or ''}")
        else:
            print(f"{item['scheduled_at']}  {item['status']:10} attempt {item['attempt']}  run {item['id']}")
    if document.get("next_cursor"):
        print("(more: page with the API's cursor)")
