#!/usr/bin/python3
"""Resolves python/requirements.in into python/requirements.lock: every package
at an exact version with the sha256 of its wheel, for Debian 12's Python 3.11
on Linux x86_64 (the only platform hlat's machines run).

usage: /usr/bin/python3 scripts/lock_python.py [--find-links DIR]

Resolves with pip's own resolver in a throwaway venv of this Python
(`pip install --dry-run --ignore-installed --report`), from PyPI, or with
--find-links from a folder of wheels only (e.g. one `pip download -r
python/requirements.in -d DIR` filled). The lock's hash names the venv
(scripts/venv_path.sh), so a new lock means a new venv at the next
scripts/setup.sh.
"""
import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REQUIREMENTS = os.path.join(ROOT, "python", "requirements.in")
LOCK = os.path.join(ROOT, "python", "requirements.lock")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--find-links", help="resolve from this folder of wheels only, not PyPI")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hlat-lock-") as tmp:
        subprocess.run([sys.executable, "-m", "venv", os.path.join(tmp, "venv")], check=True)
        pip = [os.path.join(tmp, "venv", "bin", "pip"), "--disable-pip-version-check"]
        pip_version = subprocess.run(pip + ["--version"], capture_output=True, text=True, check=True).stdout.split()[1]
        source = ["--no-index", "--find-links", args.find_links] if args.find_links else []
        report = os.path.join(tmp, "report.json")
        subprocess.run(pip + ["install", "--quiet", "--dry-run", "--ignore-installed", "--only-binary=:all:",
                              "--report", report, "-r", REQUIREMENTS] + source, check=True)
        installs = json.load(open(report))["install"]
    lines = []
    for item in sorted(installs, key=lambda i: i["metadata"]["name"].lower()):
        algorithm, digest = item["download_info"]["archive_info"]["hash"].split("=", 1)
        if algorithm != "sha256":
            sys.exit(f"lock_python.py: {item['metadata']['name']}: pip reported a {algorithm} hash, not sha256")
        lines.append(f"{item['metadata']['name']}=={item['metadata']['version']} \\\n    --hash=sha256:{digest}\n")
    python = ".".join(map(str, sys.version_info[:3]))
    header = (
        "# Every package of the venv scripts/setup.sh makes (scripts/venv_path.sh names it):\n"
        "# exact versions, each with the sha256 of its wheel for CPython 3.11 on Linux x86_64.\n"
        f"# Made by `/usr/bin/python3 scripts/lock_python.py` on {datetime.date.today()} (Python {python},\n"
        f"# pip {pip_version}'s resolver, from {'wheels in ' + args.find_links if args.find_links else 'PyPI'}) "
        "from python/requirements.in;\n"
        "# remake it the same way after editing requirements.in. Do not edit by hand.\n"
        "# Installed with `pip install --require-hashes --no-deps -r python/requirements.lock`.\n")
    with open(LOCK, "w") as f:
        f.write(header + "".join(lines))
    print(f"lock_python.py: {len(lines)} packages into {os.path.relpath(LOCK, ROOT)}")


if __name__ == "__main__":
    main()
