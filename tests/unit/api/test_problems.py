"""The problems middleware: what it answers and what it logs for failures that are not the caller's fault."""

from __future__ import annotations

import logging

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from api.problems import problems


async def test_a_client_that_went_away_mid_request_is_not_logged_as_an_unhandled_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def reads_a_body_whose_client_left(request: web.Request) -> web.StreamResponse:
        raise ConnectionResetError("Connection lost")

    request = make_mocked_request("POST", "/v1/jobs")
    with caplog.at_level(logging.INFO), pytest.raises(ConnectionResetError):
        await problems(request, reads_a_body_whose_client_left)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_any_other_failure_is_a_logged_500_problem(caplog: pytest.LogCaptureFixture) -> None:
    async def fails(request: web.Request) -> web.StreamResponse:
        raise KeyError("job_id")

    response = await problems(make_mocked_request("GET", "/v1/jobs"), fails)
    assert response.status == 500 and response.content_type == "application/problem+json"
    assert [r for r in caplog.records if "unhandled error" in r.getMessage()]
