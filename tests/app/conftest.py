"""The browser tests' Chromium (Debian's, driven through Playwright)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium for the module's tests."""
    from playwright.sync_api import sync_playwright

    from test_browser import CHROMIUM

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield b
        b.close()
