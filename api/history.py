"""GET /v1/jobs/{job_id}/history: the job's audit log, newest first, cursor-paged."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tickwheel.store.audit import JobChangeRecord

from .context import api_of, tenant_of
from .jobs import job_for_tenant
from .responses import json_response, list_document, page_limit
from .wire import instant

routes = web.RouteTableDef()


def change_document(change: JobChangeRecord) -> dict[str, Any]:
    return {
        "id": str(change.change_id),
        "job_id": str(change.job_id),
        "version": change.version,
        "action": change.action,
        "key_id": change.key_id,
        "changed_at": instant(change.changed_at),
        "diff": change.diff,
        "detail": change.detail,
    }


@routes.get("/v1/jobs/{job_id}/history")
async def job_history(request: web.Request) -> web.Response:
    api, tenant = api_of(request), tenant_of(request)
    job = await job_for_tenant(request)
    scope = f"history|{job.job_id}"
    changes, next_cursor = await api.store.job_changes(
        job.job_id,
        limit=page_limit(request, api.settings.api.page_size_max),
        cursor=api.cursors.unseal(tenant.tenant_id, scope, request.query.get("cursor")),
    )
    items = [change_document(c) for c in changes]
    return json_response(list_document(items, api.cursors.seal(tenant.tenant_id, scope, next_cursor)))
