#!/usr/bin/env bash
# Token file for `make demo` until the SentencePiece pipeline lands: the bytes
# of the licence texts every Debian system ships (/usr/share/common-licenses,
# links skipped),
# one token per byte (vocab 256), as uint16.
set -euo pipefail
out=${1:?usage: demo_data.sh OUT.u16}
mkdir -p "$(dirname "$out")"
[[ -s "$out" ]] && exit 0
find /usr/share/common-licenses -type f -print0 | sort -z | xargs -0 cat | /usr/bin/python3 -c '
import sys, numpy
numpy.frombuffer(sys.stdin.buffer.read(), dtype=numpy.uint8).astype("<u2").tofile(sys.argv[1])
' "$out"
echo "demo data: $(( $(stat -c %s "$out") / 2 )) tokens in $out"
