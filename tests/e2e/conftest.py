"""Browser tests: Playwright's sync API driving Debian's Chromium (never a downloaded browser).

`make test` installs the `chromium` package; without it these tests fail, they do not skip.
"""

import os
import shutil
from pathlib import Path

import pytest

# Playwright's sync API runs an asyncio loop in this thread; Django's ORM calls from the test body are still
# plain synchronous code, so let them through.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000


def pytest_configure(config):
    # Playwright's `expect` waits 5 s by default, whatever the page's timeout: on 2 cores shared by several
    # test workers a page can take longer to arrive, so the assertions wait as long as the actions do.
    from playwright.sync_api import expect

    expect.set_options(timeout=TIMEOUT_MS)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if report.when == "call":
        item.stash[CALL_FAILED] = report.failed
    return report


CALL_FAILED = pytest.StashKey[bool]()


@pytest.fixture(scope="session")
def chromium_executable():
    path = os.environ.get("RACKPLANE_CHROMIUM") or shutil.which("chromium")
    if not path:
        pytest.fail(
            "Chromium is not installed: the browser tests drive Debian's `chromium` package. "
            "`make test` installs it (scripts/system-deps.sh), or run `apt-get install chromium`.",
            pytrace=False,
        )
    return path


@pytest.fixture(scope="session")
def browser(chromium_executable):
    from playwright.sync_api import sync_playwright

    playwright = sync_playwright().start()
    try:
        browser = playwright.chromium.launch(
            executable_path=chromium_executable, args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser, request, tmp_path):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    yield page
    if request.node.stash.get(CALL_FAILED, False):
        screenshot = tmp_path / "failure.png"
        try:
            page.screenshot(path=str(screenshot), full_page=True)
            print(f"\nscreenshot of the failed page: {screenshot} (at {page.url})")
        except Exception as error:  # the page may be gone; the test's own failure is what matters
            print(f"\nno screenshot: {error}")
    context.close()


@pytest.fixture
def shots(tmp_path):
    """Where a test saves its screenshots: $RACKPLANE_SCREENSHOTS, or the test's tmp_path (printed)."""
    directory = Path(os.environ.get("RACKPLANE_SCREENSHOTS") or tmp_path / "screenshots")
    directory.mkdir(parents=True, exist_ok=True)
    yield directory
    print(f"\nscreenshots: {directory}")
