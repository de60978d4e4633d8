#!/usr/bin/env bash
# Installs everything hlat needs on a fresh Debian machine. Idempotent and
# non-interactive: packages already present are left alone, so a second run
# costs one dpkg query.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git
  libopenblas-openmp-dev
  libfmt-dev libspdlog-dev nlohmann-json3-dev libboost-dev libboost-program-options-dev
  libsqlite3-dev sqlite3 libcivetweb-dev
  openmpi-bin libopenmpi-dev
  libsentencepiece-dev sentencepiece
  libzstd-dev zstd zlib1g-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-torch python3-numpy
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
echo "setup: all dependencies present"
