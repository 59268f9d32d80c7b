"""
The console in a real headless Chromium (Debian's ``chromium`` and ``chromedriver``).

``saga console`` runs as a process of its own on PostgreSQL; Selenium drives
the browser through the pages as an operator would.  Screenshots of the main
pages are kept in ``$SAGA_TEST_ARTIFACTS`` (default ``.artifacts/`` at the
repository's top), and in ``docs/console/`` when ``SAGA_DOCS_SCREENSHOTS=1``.
Without the browser these tests are skipped, except under ``CI=true``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from saga import Engine
from saga.core.ops.operators import Operators
from saga.core.queue.kinds import Handlers
from saga.core.queue.leases import Queue
from saga.core.workers.worker import Worker
from saga.purchase.steps import PurchaseSteps
from saga.queue import NewJob
from tests import schemas
from tests.integration.test_console import console_process

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SAGA_TEST_ARTIFACTS", ROOT / ".artifacts")) / "screenshots"
DOCS = ROOT / "docs" / "console"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
PASSWORD = "correct-horse-battery"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def require_browser():
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not Path(path).exists()]
    if not missing:
        return
    problem = f"no browser for the console tests: {', '.join(missing)} missing"
    if IN_CI:
        pytest.fail(f"{problem} (CI=true: .ci/run installs chromium and chromium-driver)")
    pytest.skip(problem)


@pytest.fixture(autouse=True)
def _browser_first():
    """Checked before the database and the console: a skip starts nothing, so leaves nothing."""
    require_browser()


@pytest.fixture
def world(postgres_url):
    """A purchase whose payment outcome is unknown (an open item), a dead letter, two operators."""
    with Engine(postgres_url, check_schema=False) as setup:
        schemas.migrate(setup)
    with Engine(postgres_url) as engine:
        engine.services.catalogue.add("js", seats=5, price="49.00", currency="EUR")
        for n, method in enumerate(("pm_timeout_after_charge", "pm_ok", "pm_declined")):
            engine.services.purchases.start(
                operation_id=f"op-{n}",
                intensive_id="js",
                student_id=f"s-{n}",
                payment_method=method,
                hold_seconds=600,
            )
        kinds = PurchaseSteps(engine.db, engine.registry, engine.services.provider_getter).kinds()
        request = [k for k in kinds if k.name == "purchase.request_payment"]
        Worker(engine.db, Handlers(request), listen=False).run(burst=True)
        queue = Queue(engine.db)
        queue.enqueue(NewJob(id="poison-1", queue="misc", kind="poison", payload={"n": 1}))
        (job,) = queue.claim(["poison"], batch=1)
        queue.fail(job, error="ValueError: the payload names no intensive", error_class="permanent")
        Operators(engine.db).add("ann", role="operator", password=PASSWORD)
        Operators(engine.db).add("vic", role="viewer", password=PASSWORD)
        yield engine


@pytest.fixture
def console(world):
    """``saga console`` on a free port: its address."""
    with console_process(world) as (host, port):
        yield f"http://{host}:{port}"


@pytest.fixture
def chrome():
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--disable-gpu",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def wait(driver, condition):
    """Wait for ``condition``, a minute at most.

    While a click's navigation runs, an element found on the old page goes stale
    (or is not there yet): both mean "not yet", never a failure.
    """
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, 60, ignored_exceptions=ignored).until(condition)


def find(driver, css):
    """The element, once the page shows it (a click's navigation takes its time)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions

    return wait(driver, expected_conditions.presence_of_element_located((By.CSS_SELECTOR, css)))


def says(driver, css, text):
    """Wait until the element ``css`` says ``text`` (on the page a click leads to)."""
    wait(driver, lambda d: text in d.find_element("css selector", css).text)


def shows(driver, text):
    """Wait until the page's main part says ``text``."""
    says(driver, "main", text)


def arrives(driver, path):
    """Wait until the browser is on a page whose address contains ``path``."""
    wait(driver, lambda d: path in d.current_url)


def sign_in(driver, console, name="ann"):
    driver.get(f"{console}/login")
    find(driver, "input[name=name]").send_keys(name)
    find(driver, "input[name=password]").send_keys(PASSWORD)
    find(driver, "form button[type=submit]").click()
    says(driver, "header .who", f"{name} (")


def screenshot(driver, name):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"{name}.png"))
    if os.environ.get("SAGA_DOCS_SCREENSHOTS") == "1":
        DOCS.mkdir(parents=True, exist_ok=True)
        driver.save_screenshot(str(DOCS / f"{name}.png"))


def test_an_operator_resolves_an_item_from_the_queue_and_the_saga_moves(world, console, chrome):
    """Sign in, queue page, the item, resolve as paid: the purchase confirms."""
    sign_in(chrome, console)
    screenshot(chrome, "overview")
    chrome.get(f"{console}/recon")
    screenshot(chrome, "reconciliation-queue")
    find(chrome, "table a[href^='/recon/']").click()
    screenshot(chrome, "reconciliation-item")
    assert not chrome.find_elements("css selector", "input[name=outcome]:checked")  # no default
    find(chrome, "input[name=outcome][value=paid]").click()
    find(chrome, "input[name=reason]").send_keys("the provider shows the charge")
    find(chrome, "form[action$='/resolve'] button").click()
    says(chrome, ".flash", "resolved as paid")
    says(chrome, ".flash", "is now confirmed")
    (item,) = world.recon.find(status="resolved")
    assert "confirmed" == world.services.purchases.get(item.saga_id).state
    assert "operator:ann" == item.resolved_by
    find(chrome, "a[href^='/sagas/']").click()
    arrives(chrome, "/sagas/")
    screenshot(chrome, "saga")
    shows(chrome, "confirmed")


def test_an_operator_replays_a_dead_letter(world, console, chrome):
    """The dead letters page, one replay: the job is pending again."""
    sign_in(chrome, console)
    chrome.get(f"{console}/dlq")
    screenshot(chrome, "dead-letters")
    find(chrome, "form[action='/dlq/replay'] input[name=job][value='poison-1'] ~ button").click()
    says(chrome, ".flash", "replayed 1 dead letter")
    assert "pending" == Queue(world.db).get("poison-1").state


def test_a_viewer_sees_no_action_and_a_forced_one_is_refused(world, console, chrome):
    """No forms for a viewer; a form forced into the page is answered 403, nothing changed."""
    sign_in(chrome, console, name="vic")
    (item,) = world.recon.find()
    chrome.get(f"{console}/recon/{item.id}")
    shows(chrome, "viewers cannot act")
    assert not chrome.find_elements("css selector", "form[action$='/resolve']")
    chrome.execute_script(
        """
        const form = document.createElement('form');
        form.method = 'post';
        form.action = arguments[0];
        for (const [name, value] of Object.entries(arguments[1])) {
          const input = document.createElement('input');
          input.name = name; input.value = value; form.appendChild(input);
        }
        document.body.appendChild(form);
        form.submit();
        """,
        f"/recon/{item.id}/resolve",
        {
            "csrf": find(chrome, "header input[name=csrf]").get_attribute("value"),
            "version": str(item.version),
            "outcome": "paid",
            "reason": "forced",
        },
    )
    says(chrome, ".flash", "viewers cannot act")
    assert "open" == world.recon.show(item.id)[0].status


def test_a_form_without_its_csrf_token_is_refused(world, console, chrome):
    """The hidden token removed before submitting: 403, the item untouched."""
    sign_in(chrome, console)
    (item,) = world.recon.find()
    chrome.get(f"{console}/recon/{item.id}")
    chrome.execute_script(
        "document.querySelector(\"form[action$='/assign'] input[name=csrf]\").remove()"
    )
    find(chrome, "form[action$='/assign'] button").click()
    says(chrome, ".flash", "CSRF")
    assert "checker" == world.recon.show(item.id)[0].owner


def test_the_sagas_page_finds_a_saga_by_operation_id(world, console, chrome):
    """Search, then the saga's timeline with its explanation."""
    sign_in(chrome, console)
    chrome.get(f"{console}/sagas")
    screenshot(chrome, "sagas")
    find(chrome, "input[name=q]").send_keys("op-1")
    find(chrome, "form.filters button").click()
    shows(chrome, "Why it is here")
    with contextlib.suppress(Exception):
        screenshot(chrome, "saga-explained")


def test_a_sagas_events_in_and_out_do_not_overlap_at_1280_px(world, console, chrome):
    """Side by side at 1280 px with long ids and times: the two tables' boxes never intersect."""
    from saga.purchase.inbox import ProviderEvent

    purchase = next(p for p in world.services.purchases.list() if p.payment_method == "pm_ok")
    world.services.inbox.deliver(
        ProviderEvent(
            event_id="evt_" + "a-very-long-provider-event-identifier-" * 2,
            type="payment.succeeded",
            payment_id=purchase.payment["payment_id"],
            amount_minor=4900,
            currency="EUR",
        ),
        source="sandbox",
    )
    chrome.set_window_size(1280, 1000)
    sign_in(chrome, console)
    chrome.get(f"{console}/sagas/{purchase.id}")
    find(chrome, "#events-out table")
    screenshot(chrome, "saga-events")
    boxes = chrome.execute_script(
        """
        const box = (el) => { const r = el.getBoundingClientRect();
                              return [r.left, r.top, r.right, r.bottom]; };
        return ['#events-in', '#events-out'].map((id) => ({
          part: box(document.querySelector(id)),
          table: box(document.querySelector(id + ' table')),
        }));
        """
    )
    inbound, outbound = boxes

    def apart(a, b):
        return a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1]

    assert apart(inbound["table"], outbound["table"]), boxes
    assert apart(inbound["part"], outbound["part"]), boxes
    for side in boxes:  # each table fits its column: nothing runs under the neighbour
        assert side["table"][2] <= side["part"][2] + 1, boxes


def test_the_queue_fits_1280_px_with_its_money_and_deadline_columns(world, console, chrome):
    """Eleven columns, money and a relative deadline: no sideways scrolling at 1280 px."""
    chrome.set_window_size(1280, 1000)
    sign_in(chrome, console)
    chrome.get(f"{console}/recon")
    shows(chrome, "EUR")
    wide, shown = chrome.execute_script(
        "return [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    assert wide <= shown
