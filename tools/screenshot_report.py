"""Render a run's HTML report in headless Chromium and save a PNG, to check it as a person would.

    python tools/screenshot_report.py RUN_DIR/report.html -o report.png

Needs a Chromium (Debian: ``apt-get install chromium``); nothing is fetched.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path)
    parser.add_argument("-o", "--output", type=Path, default=Path("report.png"))
    parser.add_argument("--size", default="1100,1600", help="window WIDTH,HEIGHT")
    args = parser.parse_args(argv)
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        parser.error("no Chromium on PATH; install it (Debian: apt-get install chromium)")
    if not args.report.is_file():
        parser.error(f"{args.report}: no such file")
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", f"--window-size={args.size}",
               f"--screenshot={args.output.resolve()}", args.report.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or not args.output.exists():
        print(proc.stderr[-2000:], file=sys.stderr)
        return 1
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
