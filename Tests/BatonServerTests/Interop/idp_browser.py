"""Signing in through the identity provider in a real browser: Debian's chromium through chromium-driver and
Selenium, headless, at a phone's width (390 px).

Usage: idp_browser.py cockpit BASE_URL SUB SCREENSHOT_DIR
       idp_browser.py device VERIFICATION_URI_COMPLETE SUB SCREENSHOT_DIR
`cockpit`: opens the cockpit, presses "Sign in with Corp ID", signs in at the provider's own page as SUB, and
checks the cockpit's overview. `device`: opens the device page a tablet's code points to, checks it names the
code, presses "Allow: sign in with Corp ID", signs in at the provider as SUB, and checks the page says the tablet
may go on. Saves a screenshot of each page; prints one line per check; exits non-zero on the first failure.
"""

import os
import sys

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

MODE, URL, SUB, SHOTS = sys.argv[1:5]

options = webdriver.ChromeOptions()
options.binary_location = "/usr/bin/chromium"
for flag in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=390,900", "--disable-gpu",
             "--no-first-run"]:
    options.add_argument(flag)
# A headless window is at least 500 px wide; a phone's viewport is emulated instead.
options.add_experimental_option("mobileEmulation", {"deviceMetrics": {"width": 390, "height": 900, "pixelRatio": 1}})
driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
wait = WebDriverWait(driver, 20)


def check(condition, what):
    if not condition:
        print("FAILED:", what, "at", driver.current_url)
        print(driver.page_source[:2000])
        driver.quit()
        sys.exit(1)
    print("ok:", what)


def provider_sign_in():
    """On the provider's own page: press the button of the predefined person SUB."""
    try:
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, f'button[name="sub"][value="{SUB}"]'))
    except Exception:
        check(False, f"the provider's page offers {SUB} (at {driver.current_url}: {driver.page_source[:1500]})")
    driver.find_element(By.CSS_SELECTOR, f'button[name="sub"][value="{SUB}"]').click()


try:
    if MODE == "cockpit":
        driver.get(URL.rstrip("/") + "/admin/sign-in")
        buttons = driver.find_elements(By.CSS_SELECTOR, "button.provider")
        check([b.text for b in buttons] == ["Sign in with Corp ID"], "the sign-in page shows the provider's button")
        driver.save_screenshot(os.path.join(SHOTS, "sign-in-provider-390.png"))
        buttons[0].click()
        provider_sign_in()
        wait.until(lambda d: d.current_url.endswith("/admin/"))
        check("Overview" in driver.page_source and f"({os.environ.get('BATON_EXPECTED_USER', 'alice')})"
              in driver.page_source, "the cockpit opens for the person the provider signed in")
        driver.save_screenshot(os.path.join(SHOTS, "cockpit-through-provider-390.png"))
    else:
        driver.get(URL)
        code = driver.find_element(By.CSS_SELECTOR, "strong.code").text
        check(len(code) == 9 and code[4] == "-", f"the device page names the tablet's code {code}")
        driver.save_screenshot(os.path.join(SHOTS, "device-provider-390.png"))
        driver.find_element(By.CSS_SELECTOR, "button.provider").click()
        provider_sign_in()
        wait.until(lambda d: "Allow the tablet?" in d.page_source)
        check(code in driver.find_element(By.TAG_NAME, "main").text, "Baton asks whether to allow that code")
        driver.save_screenshot(os.path.join(SHOTS, "device-allow-390.png"))
        driver.find_element(By.CSS_SELECTOR, 'button[value="allow"]').click()
        wait.until(lambda d: "Go back to the device" in d.page_source)
        check("Signed in as" in driver.page_source, "the page tells the person the tablet goes on")
    print("browser checks passed")
finally:
    driver.quit()
