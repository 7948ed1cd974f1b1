#!/usr/bin/env bash
# Installs what tests/it/s3.rs runs, under DIR (the it tests' CARGO_TARGET_TMPDIR,
# `target/tmp`), and does nothing when it is there already:
#   DIR/s3-venv         a venv with moto's S3 server, boto3, polars and chDB (PyPI);
#   DIR/s3s-fs/bin/s3s-fs  the s3s-fs S3 server (crates.io, `cargo install`).
# The tests run it before their first server; .ci/run runs it early, in the
# background, so that pip's downloads (chDB's wheel alone is 534 MB) and the s3s-fs build
# overlap CI's own builds instead of following them. A lock makes the two safe
# together. The releases are pinned here, and only here: each server's reading of
# S3, and each engine's reader, are what the tests test. `s3-tools.sh DIR s3s-fs`
# installs s3s-fs alone (benches/chaos.sh needs no Python engines).
set -euo pipefail

MOTO=5.2.5
POLARS=2.1.0
CHDB=4.4.0
# The newest s3s-fs that builds with the workspace's toolchain (rustc 1.95): 0.15
# and later need a newer rustc.
S3S_FS=0.14.1

dir=${1:?usage: s3-tools.sh DIR [s3s-fs]}
only=${2:-}
mkdir -p "$dir"
exec 9>"$dir/s3-tools.lock"
flock 9

venv=$dir/s3-venv
wanted="$MOTO $POLARS $CHDB"
has() {
    "$venv/bin/python" -c 'import moto, polars, chdb, boto3
print(moto.__version__, polars.__version__, chdb.__version__)' 2>/dev/null
}
if [[ $only != s3s-fs && $(has) != "$wanted" ]]; then
    echo "s3-tools: installing moto $MOTO, polars $POLARS, chDB $CHDB into $venv" >&2
    rm -rf "$venv"
    # Debian's python3 leaves `venv` (and its ensurepip) to the python3-venv package.
    if ! python3 -c 'import ensurepip, venv' 2>/dev/null && command -v apt-get >/dev/null; then
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 \
            install -y -qq python3-venv >/dev/null
    fi
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check \
        "moto[server]==$MOTO" "polars==$POLARS" "chdb==$CHDB"
    [[ $(has) == "$wanted" ]] || { echo "s3-tools: moto, polars or chdb is not importable" >&2; exit 1; }
fi

s3s_fs=$dir/s3s-fs/bin/s3s-fs
if [[ $("$s3s_fs" --version 2>/dev/null) != "s3s-fs $S3S_FS" ]]; then
    echo "s3-tools: installing s3s-fs $S3S_FS into $dir/s3s-fs" >&2
    # Its own target directory: the workspace's lock and features are not its. A
    # debug build: no optimizing to wait for, and fast enough for the tests' few
    # megabytes.
    "${CARGO:-cargo}" install "s3s-fs@$S3S_FS" --features binary --locked --quiet --debug \
        --root "$dir/s3s-fs" --target-dir "$dir/s3s-fs-build"
    [[ $("$s3s_fs" --version) == "s3s-fs $S3S_FS" ]] || { echo "s3-tools: no s3s-fs $S3S_FS at $s3s_fs" >&2; exit 1; }
fi
