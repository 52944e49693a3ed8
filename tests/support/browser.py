"""A real headless Chromium for the UI tests: Debian's ``chromium`` + ``chromium-driver``, driven by Selenium.

When they are missing and the tests run as root with ``CI=true`` (the CI
machine), they are installed with apt-get (``apt-get update`` once, then the
packages, plus a CJK font so screenshots of Chinese text are readable).
Anywhere else a missing browser skips the browser tests with the command to
run. Installed already: no apt call, nothing to wait for.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PACKAGES = ("chromium", "chromium-driver", "fonts-wqy-zenhei")
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-zenhei.ttc")
INSTALL_HINT = "apt-get update && apt-get install -y " + " ".join(PACKAGES)


def _missing() -> list[str]:
    missing = []
    if shutil.which("chromium") is None:
        missing.append("chromium")
    if shutil.which("chromedriver") is None:
        missing.append("chromium-driver")
    if not CJK_FONT.exists():
        missing.append("fonts-wqy-zenhei")
    return missing


def ensure_chromium() -> tuple[str, str]:
    """The paths of ``chromium`` and ``chromedriver``, installing them first where allowed (see the module doc)."""
    missing = _missing()
    if missing and os.geteuid() == 0 and os.environ.get("CI") == "true":
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-qq", *missing], check=True, env=env, stdout=subprocess.DEVNULL)
        missing = _missing()
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(f"headless Chromium not installed ({', '.join(missing)}): {INSTALL_HINT}")
    return chromium, driver


def start_driver(width: int = 1440, height: int = 1000) -> Any:
    """A headless Chrome WebDriver on Debian's Chromium (the local chromedriver: nothing is downloaded)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = ensure_chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={width},{height}", "--lang=en-US"):  # fmt: skip
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


def full_page_screenshot(driver: Any, path: Path) -> Path:
    """The whole page, not only the viewport (Chrome DevTools ``captureBeyondViewport``)."""
    import base64

    metrics = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {"format": "png", "captureBeyondViewport": True,
         "clip": {"x": 0, "y": 0, "width": size["width"], "height": min(size["height"], 6000), "scale": 1}},
    )  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path
