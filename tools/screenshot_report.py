"""Render a run's HTML report in headless Chromium and save a PNG, to check it as a person would.

    python tools/screenshot_report.py RUN_DIR/report.html -o report.png [--size 1100,1600]

Needs a Chromium on PATH (Debian: ``apt-get install chromium``); without one it exits 2
saying so. Nothing is fetched: the report is self-contained and the browser runs with
its background networking off.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _size(text: str) -> str:
    parts = text.split(",")
    if len(parts) != 2 or not all(p.strip().isdigit() and int(p) > 0 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: give WIDTH,HEIGHT in pixels, e.g. 1100,1600")
    return ",".join(p.strip() for p in parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the report's HTML file")
    parser.add_argument("-o", "--output", type=Path, default=Path("report.png"), help="the PNG to write")
    parser.add_argument("--size", type=_size, default="1100,1600", help="window WIDTH,HEIGHT (the PNG's size)")
    args = parser.parse_args(argv)
    browser = next((found for name in BROWSERS if (found := shutil.which(name))), None)
    if browser is None:
        print("screenshot_report: no Chromium on PATH; install it (Debian: apt-get install chromium)",
              file=sys.stderr)
        return 2
    if not args.report.is_file():
        print(f"screenshot_report: {args.report}: no such file", file=sys.stderr)
        return 2
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--hide-scrollbars", f"--user-data-dir={profile}", f"--window-size={args.size}",
               f"--screenshot={args.output.resolve()}", args.report.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not args.output.exists():
        print(proc.stderr[-2000:], file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
