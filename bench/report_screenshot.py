"""Headless Chromium's view of an HTML report, saved as a PNG (for README)."""
import os
import shutil
import subprocess


def screenshot(html, png):
    """Opens the report in headless Chromium, as a person would, and saves what it shows."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={os.path.dirname(png)}/chromium-profile", "--window-size=1600,2200",
                    "--hide-scrollbars", f"--screenshot={png}", "file://" + os.path.abspath(html)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
