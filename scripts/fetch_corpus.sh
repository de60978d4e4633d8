#!/usr/bin/env bash
# Fetches the default corpus, the Python documentation in Texinfo form, from
# Debian's python3.X-doc package (newest X the archive has) into DEST, without
# installing anything system-wide. Writes DEST/python3.X.info.gz and
# DEST/package.txt (package name and version). Idempotent.
set -euo pipefail
dest=${1:?usage: fetch_corpus.sh DEST}
mkdir -p "$dest"
if compgen -G "$dest/python3.*.info.gz" >/dev/null && [[ -s "$dest/package.txt" ]]; then exit 0; fi

find_package() { apt-cache pkgnames python3. 2>/dev/null | grep -E '^python3\.[0-9]+-doc$' | sort -V | tail -1; }
pkg=$(find_package)
if [[ -z "$pkg" ]]; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  pkg=$(find_package)
fi
[[ -n "$pkg" ]] || { echo "fetch_corpus: no python3.X-doc package in the apt archive" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
chmod a+rwx "$work"  # apt downloads as the _apt user
(cd "$work" && apt-get download -qq "$pkg" 2>/dev/null)
deb=$(ls "$work"/*.deb)
dpkg-deb -x "$deb" "$work/x"
info=$(ls "$work"/x/usr/share/info/python3.*.info.gz | head -1)
cp "$info" "$dest/"
echo "$pkg $(dpkg-deb -f "$deb" Version)" > "$dest/package.txt"
echo "fetch_corpus: $(basename "$info") from $(cat "$dest/package.txt")"
