"""Drives the admin web console in headless Chromium (python `selenium`, Debian's chromium and
chromium-driver) for the gateway tests.

Usage: console_check.py BASE_URL TOKEN SCREENSHOT_PATH REQUEST_ID API_NAME
       (env SECRET: a value the gateway must have redacted; it must appear nowhere in the page)

1. opens BASE_URL/console and expects the login page (#token);
2. signs in through the form;
3. waits until the APIs table lists API_NAME (and the API filter offers it);
4. waits until the exchanges table has the row tr[data-id=REQUEST_ID] (pressing Refresh while
   waiting), opens it, waits for the request headers in #details, checks the authorization
   header reads `<redacted>` and that SECRET is nowhere in the page source;
5. saves a screenshot to SCREENSHOT_PATH;
6. prints OK and exits 0. On a failure it prints the reason, the browser's console errors and
   the page source (truncated), and exits 1.
"""
import os
import sys
import time

from selenium import webdriver
from selenium.common.exceptions import (ElementClickInterceptedException, StaleElementReferenceException,
                                        TimeoutException, WebDriverException)
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

TIMEOUT = 10
POLL = 0.25
SOURCE_LIMIT = 6000


class Failure(Exception):
    pass


def css_string(value):
    """A CSS string literal for an attribute selector."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def wait_for(driver, what, condition, timeout=TIMEOUT):
    try:
        return WebDriverWait(driver, timeout, poll_frequency=POLL,
                             ignored_exceptions=(StaleElementReferenceException,
                                                 ElementClickInterceptedException)).until(condition)
    except TimeoutException:
        raise Failure(f"timed out after {timeout} s waiting for {what}") from None


def texts(driver, selector):
    return [e.text.strip() for e in driver.find_elements(By.CSS_SELECTOR, selector)]


def start_browser():
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,900",
                "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                "--disable-background-networking", "--disable-component-update"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    service = Service(executable_path=os.environ.get("CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(TIMEOUT)
    return driver


def browser_errors(driver):
    try:
        return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
    except WebDriverException:
        return []


def check(driver, base, token, screenshot, request_id, api_name, secret):
    # 1. No token yet: the console answers with the login page.
    driver.get(base + "/console")
    wait_for(driver, "the login page (#token)",
             lambda d: d.find_elements(By.ID, "token") and d.find_elements(By.ID, "login"))
    if driver.find_elements(By.ID, "exchanges"):
        raise Failure("the console was shown without a token")

    # 2. Sign in through the form.
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.ID, "login").click()

    def signed_in(d):
        rejected = d.find_elements(By.CSS_SELECTOR, "#login-msg:not([hidden])")
        if rejected:
            raise Failure("the token was not accepted: " + rejected[0].text)
        return d.find_elements(By.ID, "exchanges") and not d.find_elements(By.ID, "token")

    wait_for(driver, "the console after signing in (#exchanges)", signed_in)

    # 3. The APIs table lists the API, and the filter offers it.
    wait_for(driver, f"API {api_name!r} in the APIs table",
             lambda d: api_name in texts(d, "#apis tbody th"))
    wait_for(driver, f"API {api_name!r} in #api-filter",
             lambda d: d.find_elements(By.CSS_SELECTOR, f"#api-filter option[value={css_string(api_name)}]"))

    # 4. The exchange's row, then its details.
    row_selector = f"#exchanges tbody tr[data-id={css_string(request_id)}]"
    last_refresh = [time.monotonic()]

    def row_clicked(d):
        rows = d.find_elements(By.CSS_SELECTOR, row_selector)
        if not rows:
            if time.monotonic() - last_refresh[0] >= 1:  # besides the page's own 2 s refresh
                last_refresh[0] = time.monotonic()
                d.find_element(By.ID, "refresh").click()
            return False
        # Centred, so the table's sticky header cannot take the click.
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", rows[0])
        rows[0].click()
        return True

    wait_for(driver, f"the row of exchange {request_id}", row_clicked)
    request_headers = "#details table.headers[data-kind=request] tbody tr"
    wait_for(driver, "the request headers in #details",
             lambda d: d.find_element(By.ID, "details").is_displayed()
             and d.find_elements(By.CSS_SELECTOR, request_headers))
    headers = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, request_headers):
        name = tr.find_element(By.TAG_NAME, "th").text.strip().lower()
        headers.setdefault(name, tr.find_element(By.TAG_NAME, "td").text.strip())
    if "authorization" not in headers:
        raise Failure(f"no authorization header among the request headers: {sorted(headers)}")
    if headers["authorization"] != "<redacted>":
        raise Failure(f"the authorization header reads {headers['authorization']!r}, not '<redacted>'")
    if secret in driver.page_source:
        raise Failure("the secret appears in the page source")

    # 5. A picture of the console with the details open.
    if not driver.save_screenshot(screenshot):
        raise Failure(f"could not save the screenshot to {screenshot}")

    errors = [e for e in browser_errors(driver) if "Uncaught" in e]
    if errors:
        raise Failure("script errors in the page: " + " | ".join(errors))


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        print("usage: console_check.py BASE_URL TOKEN SCREENSHOT_PATH REQUEST_ID API_NAME")
        return 2
    base, token, screenshot, request_id, api_name = sys.argv[1:]
    base = base.rstrip("/")
    secret = os.environ.get("SECRET", "")
    if not secret:
        print("SECRET is not set: give the value that must not appear in the page")
        return 1
    driver = None
    try:
        driver = start_browser()
        check(driver, base, token, screenshot, request_id, api_name, secret)
    except (Failure, WebDriverException, OSError) as e:
        print(f"FAIL: {getattr(e, 'msg', None) or e}")
        if driver is not None:
            try:
                print("url:", driver.current_url)
                for message in browser_errors(driver):
                    print("browser:", message)
                source = driver.page_source
                if secret:
                    source = source.replace(secret, "<SECRET>")
                print("page source:")
                print(source[:SOURCE_LIMIT] + ("\n... (truncated)" if len(source) > SOURCE_LIMIT else ""))
            except WebDriverException as inner:
                print(f"(no page source: {inner.msg})")
        return 1
    finally:
        if driver is not None:
            driver.quit()
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
