#!/usr/bin/env bash
# Prints the path of the project's Python environment: the venv scripts/setup.sh
# makes from python/requirements.lock, outside the work tree so that fresh
# clones on one machine share it, named by the lock's hash so that a new lock
# gets a new venv. HLAT_VENV_ROOT moves it (default ~/.cache/hlat).
set -euo pipefail
lock="$(dirname "${BASH_SOURCE[0]}")/../python/requirements.lock"
hash="$(sha256sum "$lock")"
echo "${HLAT_VENV_ROOT:-$HOME/.cache/hlat}/venv-${hash:0:16}"
