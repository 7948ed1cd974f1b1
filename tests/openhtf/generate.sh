#!/usr/bin/env bash
# Rewrites tests/openhtf/records/*.openhtf.json with OpenHTF itself: installs the
# pinned OpenHTF into a virtual environment under target/ (kept out of git) and runs
# benches.py, whose small tests write their records with OpenHTF's JSON output
# callback. Run from anywhere: bash tests/openhtf/generate.sh
set -euo pipefail

# The version the committed records were written with; tests/openhtf/README.md says
# what changes when it moves.
OPENHTF_VERSION=1.6.3

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="$root/target/openhtf-venv"

if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('openhtf') != '$OPENHTF_VERSION')" 2>/dev/null; then
    "$venv/bin/pip" install --quiet "openhtf==$OPENHTF_VERSION"
fi

rm -f "$here"/records/*.openhtf.json
"$venv/bin/python" "$here/benches.py" "$here/records"
# OpenHTF writes through a temporary file, which is private (0600).
chmod 644 "$here"/records/*.openhtf.json
ls -l "$here"/records
