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
  # python3-dev: torch.compile's inductor builds its CPU kernels against Python's headers
  python3-venv python3-dev
  libprotobuf-dev protobuf-compiler
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
# The Python environment of the client's tests, the PyTorch references and the
# benches (scripts/python runs it): a venv of python/requirements.lock, outside
# the work tree, named by the lock's hash. Its wheels are kept beside it (pip's
# own cache keeps nothing where PyPI's files come without Cache-Control), so a
# new lock downloads only what changed. Built in a sibling folder and renamed
# into place once complete, so an interrupted install never looks done. Venvs of
# other locks and their wheels are left alone (another checkout may use them):
# remove unused ones by hand.
repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="$(bash "$repo/scripts/venv_path.sh")"
wheels="$(dirname "$venv")/wheels"
make_venv() {
  echo "setup: creating $venv from python/requirements.lock (the first time on a machine this downloads ~2.8 GB: PyTorch's CUDA build)"
  rm -rf "$venv".partial-*  # a killed set-up's: this one holds the lock
  partial="$(mktemp -d "$venv.partial-XXXXXX")" && chmod 755 "$partial"
  trap 'rm -rf "$partial"' EXIT
  /usr/bin/python3 -m venv --prompt hlat "$partial"
  local pip=("$partial/bin/pip" --quiet --disable-pip-version-check)
  "${pip[@]}" download --require-hashes --no-deps --only-binary=:all: -d "$wheels" -r "$repo/python/requirements.lock"
  "${pip[@]}" install --require-hashes --no-deps --no-index --find-links "$wheels" -r "$repo/python/requirements.lock"
  # A venv's scripts name its python by absolute path: point them at the final place.
  grep -rlI --null -F "$partial" "$partial/bin" "$partial/pyvenv.cfg" | xargs -0 -r sed -i "s|$partial|$venv|g"
  mv -T "$partial" "$venv"
  trap - EXIT
}
if [[ ! -x "$venv/bin/python" ]]; then
  mkdir -p "$wheels"
  exec 9>"$venv.lock"
  flock 9  # a set-up started meanwhile waits here, then finds the venv made
  [[ -x "$venv/bin/python" ]] || make_venv
  exec 9>&-
fi
echo "setup: all dependencies present"
