"""The web console in a real browser (Debian's chromium driven by Playwright) against the running platform:
sign in, create a job through the form, pause it, see its preview and a run that fired, redrive a dead letter,
see the upcoming load and the operator's 1,024 owned shards. No JavaScript error may reach the console."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from playwright.async_api import BrowserContext, ConsoleMessage, Page, async_playwright, expect

from tests.e2e.conftest import Platform
from tickwheel.dev.sink import Sink
from tickwheel.store.cassandra import CassandraStore
from tickwheel.store.tenants import create_tenant

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).parent / "screenshots"
# What the brief asks of a headless browser here: no GPU, no network of its own, nothing fetched at start.
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
WAIT_MS = 15_000
# Playwright's assertions retry for 5 s by default; what they wait for here comes from the API (LWTs, a run firing)
# on a loaded box, seconds late. An assertion returns as soon as it holds, so only a failing test waits longer.
expect.set_options(timeout=30_000)
# Every form control and button on the page has a name a screen reader can announce.
UNLABELLED_CONTROLS = """() => [...document.querySelectorAll('input, select, textarea, button')]
  .filter((el) => el.offsetParent !== null || el.closest('dialog[open]'))
  .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute('aria-label') && !el.textContent.trim())
  .map((el) => el.outerHTML.slice(0, 120))"""


def chromium_installed() -> bool:
    return CHROMIUM.exists()


@pytest.fixture(scope="module")
async def browser(tmp_path_factory: pytest.TempPathFactory, platform: Platform) -> AsyncIterator[BrowserContext]:
    """Debian's chromium with a fresh profile, at the console's origin (each test opens its own tab)."""
    if not chromium_installed():
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium (.ci/run does this)")
    async with async_playwright() as pw:
        context = await pw.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")),
            executable_path=str(CHROMIUM),
            args=CHROMIUM_ARGS,
            headless=True,
            viewport={"width": 1280, "height": 860},
            base_url=platform.api_url,
        )
        yield context
        await context.close()


@pytest.fixture
async def tenant(store: CassandraStore, platform: Platform) -> AsyncIterator[tuple[str, str]]:
    """(tenant id, API key) of a fresh tenant; its jobs are deleted afterwards, so none fires on through the
    rest of the session's tests."""
    made, key = await create_tenant(store, f"console-{uuid.uuid4().hex[:8]}", datetime.now(UTC))
    yield made.tenant_id, key
    listed = await api(platform, key, "GET", "/v1/jobs?limit=500")
    for job in listed["items"]:
        await api(platform, key, "DELETE", f"/v1/jobs/{job['id']}")


@pytest.fixture
async def page(browser: BrowserContext, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    """A new tab (so a new sessionStorage: signed out); fails the test on any JavaScript error or unnamed control
    left on the page; saves a screenshot."""
    opened = await browser.new_page()
    errors: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error" and not api_refusal(message):
            errors.append(f"console: {message.text} at {message.location}")

    opened.on("console", on_console)
    opened.on("pageerror", lambda exc: errors.append(f"uncaught: {exc}"))
    yield opened
    errors += [f"no accessible name: {html}" for html in await opened.evaluate(UNLABELLED_CONTROLS)]
    SCREENSHOTS.mkdir(exist_ok=True)
    await opened.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"))
    await opened.close()
    assert errors == [], "JavaScript errors in the browser:\n" + "\n".join(errors)


async def shot(page: Page, name: str, *, full_page: bool = False) -> None:
    """One picture per console page for docs/console.md (copied from tests/e2e/screenshots/pages/ by hand)."""
    (SCREENSHOTS / "pages").mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=str(SCREENSHOTS / "pages" / f"{name}.png"), full_page=full_page)


async def fits_a_tablet(page: Page) -> bool:
    """At a tablet's width (768 px, portrait) the page needs no sideways scrolling (wide tables scroll inside)."""
    await page.set_viewport_size({"width": 768, "height": 1024})
    await page.wait_for_timeout(300)
    return bool(await page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"))


def api_refusal(message: ConsoleMessage) -> bool:
    """Chromium logs every 4xx answer as a console error; the API's 4xx answers are expected (the console shows
    their problem+json, e.g. a 422 next to the field), so those, and only those, are not JavaScript errors."""
    refused = message.text.startswith("Failed to load resource: the server responded with a status of 4")
    return refused and urlsplit(message.location.get("url", "")).path.startswith("/v1/")


async def sign_in(page: Page, key: str) -> None:
    await page.goto("/console/")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await expect(page.get_by_role("heading", name="Jobs")).to_be_visible()


async def api(
    platform: Platform, key: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    async with aiohttp.ClientSession() as http:
        headers = {"Authorization": f"Bearer {key}", **(headers or {})}
        async with http.request(method, platform.api_url + path, json=body, headers=headers) as answer:
            assert answer.status < 300, await answer.text()
            return await answer.json() if answer.status != 204 else None


async def eventually(check: Callable[[], Awaitable[Any]], timeout_s: float = 60, what: str = "") -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await asyncio.sleep(1)
    pytest.fail(f"not seen within {timeout_s:.0f} s: {what}")


def every_5_s(sink: Sink, path: str, **overrides: Any) -> dict[str, Any]:
    target = {"type": "http", "url": sink.url(path)}
    return {"name": path, "schedule": {"type": "interval", "everyS": 5}, "target": target, **overrides}


async def test_sign_in_create_a_job_through_the_form_see_it_listed_and_pause_it(
    page: Page, platform: Platform, tenant: tuple[str, str], sink: Sink
) -> None:
    await page.goto("/console/")
    await expect(page.get_by_label("API key")).to_be_focused()
    await shot(page, "sign-in")
    await sign_in(page, tenant[1])
    await page.get_by_role("link", name="New job").click()
    await page.get_by_label("Name (optional)").fill("nightly export")
    expr = page.get_by_label("Cron expression")
    await expr.fill("30 2 * * *")
    await page.get_by_label("Time zone (IANA)").fill("Europe/Paris")
    await expect(page.locator("#c-preview li")).to_have_count(10)  # the live preview, from the API
    await expr.fill("61 2 * * *")
    await expect(page.locator("#c-expr-error")).to_contain_text("61")  # the API's error, next to its field
    await expect(expr).to_have_attribute("aria-invalid", "true")
    await expr.fill("30 2 * * *")
    await page.get_by_label("Target URL").fill(sink.url("/console/nightly"))
    await page.get_by_label("Labels (key=value, comma separated)").fill("team=data")
    await expect(page.locator("#c-preview li")).to_have_count(10)
    await shot(page, "new-job")
    await page.get_by_role("button", name="Create job").click()
    await expect(page.get_by_role("heading", name="Next 10 fires")).to_be_visible()

    await page.get_by_role("link", name="Jobs", exact=True).click()
    row = page.locator("tr", has=page.get_by_role("link", name="nightly export"))
    await expect(row).to_contain_text("at 02:30 every day, Europe/Paris")
    await expect(row).to_contain_text("team=data")
    await row.get_by_role("button", name="Pause nightly export").click()
    await expect(row.locator(".badge").first).to_have_text("PAUSED")
    await shot(page, "jobs")
    assert await fits_a_tablet(page)

    listed = await api(platform, tenant[1], "GET", "/v1/jobs?state=PAUSED")
    assert [job["name"] for job in listed["items"]] == ["nightly export"]


async def test_a_jobs_page_shows_its_next_fires_a_run_that_fired_with_its_attempts_and_a_conflicting_edit(
    page: Page, platform: Platform, tenant: tuple[str, str], sink: Sink
) -> None:
    job = await api(platform, tenant[1], "POST", "/v1/jobs", every_5_s(sink, "/console/fires"))

    async def succeeded() -> bool:
        runs = await api(platform, tenant[1], "GET", f"/v1/jobs/{job['id']}/runs")
        return any(r["status"] == "SUCCEEDED" for r in runs["items"])

    await eventually(succeeded, what="a SUCCEEDED run")
    await sign_in(page, tenant[1])
    await page.goto(f"/console/#/jobs/{job['id']}")

    await expect(page.locator("tr.fire")).to_have_count(10)
    mark = page.locator(".timeline .mark.s-SUCCEEDED").first
    await expect(mark).to_be_visible()
    await mark.click()
    attempts = page.get_by_role("table", name="Attempts")
    await expect(attempts).to_contain_text("200")
    await expect(attempts).to_contain_text("SUCCEEDED")
    await shot(page, "job", full_page=True)

    # someone else edits the job after the page was loaded: saving the page's version is refused, plainly
    await api(platform, tenant[1], "PATCH", f"/v1/jobs/{job['id']}", {"name": "renamed elsewhere"}, {"If-Match": '"1"'})
    await page.get_by_role("button", name="Save changes").click()
    await expect(page.locator("#edit-error")).to_contain_text("changed by someone else")


async def test_a_dead_letter_is_dry_run_then_redriven_with_the_predicted_count(
    page: Page, platform: Platform, tenant: tuple[str, str], sink: Sink
) -> None:
    # a 400 is permanent: dead at the first attempt
    soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    body = {"name": "doomed", "schedule": {"type": "once", "runAt": soon},
            "target": {"type": "http", "url": sink.url("/console/dead?status=400")}}  # fmt: skip
    job = await api(platform, tenant[1], "POST", "/v1/jobs", body)

    async def dead() -> list[Any]:
        return list((await api(platform, tenant[1], "GET", f"/v1/dead-letters?job_id={job['id']}"))["items"])

    letter = (await eventually(dead, what="the dead letter"))[0]
    await sign_in(page, tenant[1])
    await page.get_by_role("link", name="Dead letters").click()
    await page.get_by_label(f"Select run {letter['run_id']}").check()
    await page.get_by_role("button", name="Dry run").click()
    await expect(page.locator("#d-plan")).to_contain_text("1 dead letter(s) would be redriven")
    await shot(page, "dead-letters")
    await page.get_by_role("button", name="Redrive 1").click()
    await expect(page.locator("#status")).to_contain_text("Redriven 1 of the 1 the dry run predicted")

    after = await api(platform, tenant[1], "GET", f"/v1/dead-letters?job_id={job['id']}")
    # The redriven run is called again at once and, answered 400 again, may be dead a second time already: a newer
    # letter, listed first. The letter redriven is the first death's.
    redriven = [item for item in after["items"] if item["dead_at"] == letter["dead_at"]]
    assert len(redriven) == 1 and redriven[0]["redriven_at"] is not None, after["items"]


async def test_the_upcoming_load_shows_the_tenants_runs_per_minute_and_per_hour(
    page: Page, platform: Platform, tenant: tuple[str, str], sink: Sink
) -> None:
    body = every_5_s(sink, "/console/load")
    body["schedule"]["everyS"] = 60
    await api(platform, tenant[1], "POST", "/v1/jobs", body)
    await sign_in(page, tenant[1])
    await page.get_by_role("link", name="Upcoming load").click()

    minutes = page.get_by_role("table", name="Runs due per minute")
    await expect(minutes.locator("td[aria-label$=': 1 run(s)']").nth(118)).to_be_visible(timeout=WAIT_MS)
    # once a minute for 2 hours from its creation: 120 minutes hold a run, or 119 once the first one is past
    assert await minutes.locator("td[aria-label$=': 1 run(s)']").count() in (119, 120)
    await expect(page.get_by_role("table", name="Runs due per hour")).to_be_visible()
    await expect(page.locator(".chart canvas").first).to_be_visible()  # drawn by the vendored uPlot
    await shot(page, "load", full_page=True)
    assert await fits_a_tablet(page)


async def test_the_operator_page_shows_every_shard_owned_lanes_and_the_forecast(page: Page, platform: Platform) -> None:
    await page.goto("/console/#/operator")
    await page.get_by_label("Operator key").fill(platform.operator_key)
    await page.get_by_role("button", name="Open the operator page").click()
    # the page reloads itself every 10 s, so a slow first answer (a busy Cassandra) is not a failure
    await expect(page.get_by_role("table", name="Lanes and consumer lag")).to_be_visible(timeout=30_000)

    # every shard gets a checkpoint once its dispatcher has fired through 10 s of it; the page refreshes itself
    await expect(page.get_by_role("heading", name="Shards: 1024 of 1024 owned")).to_be_visible(timeout=90_000)
    await expect(page.locator("#shardmap span.owned")).to_have_count(1024)
    await expect(page.get_by_role("table", name="Shard ranges by owner and epoch")).to_contain_text("1024")
    await expect(page.locator("#op-forecast-chart canvas")).to_be_visible()
    await shot(page, "operator", full_page=True)
    assert await fits_a_tablet(page)


async def test_the_jobs_table_pages_with_the_apis_cursors_and_filters_by_label(
    page: Page, platform: Platform, tenant: tuple[str, str], sink: Sink
) -> None:
    for i in range(23):
        body = every_5_s(sink, f"/console/paged/{i:02d}", labels={"batch": "odd" if i % 2 else "even"})
        body["schedule"] = {"type": "cron", "expr": "0 3 * * *", "tz": "Asia/Kolkata"}
        await api(platform, tenant[1], "POST", "/v1/jobs", body)
    await sign_in(page, tenant[1])
    rows = page.get_by_role("table", name="Jobs").locator("tbody tr")

    await expect(rows).to_have_count(20)
    first_page = set(await rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)"))
    await page.get_by_role("button", name="Next page").click()
    await expect(rows).to_have_count(3)
    second_page = set(await rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)"))
    await expect(page.get_by_role("button", name="Next page")).to_be_disabled()
    await page.get_by_role("button", name="Previous page").click()
    await expect(rows).to_have_count(20)
    assert set(await rows.evaluate_all("rows => rows.map(r => r.dataset.jobId)")) == first_page
    assert first_page.isdisjoint(second_page) and len(first_page | second_page) == 23

    await page.get_by_label("Label (key=value)").fill("batch=odd")
    await page.get_by_role("button", name="Filter").click()
    await expect(rows).to_have_count(11)
    await expect(rows.first).to_contain_text("at 03:00 every day, Asia/Kolkata")
