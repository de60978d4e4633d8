#!/usr/bin/env bash
# Installs everything hlat needs on a fresh Debian machine. Idempotent and
# non-interactive: packages already present are left alone, so a second run
# costs one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libdnnl-dev
  libfmt-dev libspdlog-dev nlohmann-json3-dev libsimdjson-dev libboost-dev libboost-program-options-dev
  libsqlite3-dev sqlite3 libcivetweb-dev
  openmpi-bin libopenmpi-dev
  libsentencepiece-dev sentencepiece libre2-dev
  libzstd-dev zstd zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy libopenblas0-pthread
  libprotobuf-dev protobuf-compiler python3-protobuf python3-crcmod
  chromium
  clang libclang-rt-dev
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The page's browser libraries (uPlot) and the end-to-end test's driver
# (playwright-core, which drives Debian's chromium: it downloads no browser),
# pinned by web/package-lock.json.
if ! command -v npm >/dev/null; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
fi
web="$(cd "$(dirname "$0")/../web" && pwd)"
if [[ ! -f "$web/node_modules/.package-lock.json" || "$web/package-lock.json" -nt "$web/node_modules/.package-lock.json" ]]; then
  echo "setup: installing web/node_modules from package-lock.json"
  (cd "$web" && npm ci --no-audit --no-fund --loglevel=error)
fi
echo "setup: all dependencies present"
