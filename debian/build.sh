#!/usr/bin/env bash
# Builds stq's Debian package: target/debian/stq_<version>-1_<arch>.deb.
#
# cargo-deb (pinned below) comes from crates.io, installed here when missing. The
# man pages and completions are written by `cargo xtask deb-assets` (xtask/) from
# stq's own command line, into target/deb-assets/, which [package.metadata.deb] in Cargo.toml packages.
# The release build takes minutes (9 on two cores with another build beside it);
# the rest, seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_DEB_VERSION=3.8.0
if [[ $(cargo deb --version 2>/dev/null) != *" $CARGO_DEB_VERSION"* ]]; then
    echo "installing cargo-deb $CARGO_DEB_VERSION"
    # A debug build: half the CPU of a release one to compile (99 against 188 s),
    # and the same package in the same time (its compressors are optimized in its
    # own dev profile).
    cargo install cargo-deb --locked --debug --version "$CARGO_DEB_VERSION"
fi

# One cargo run for both, so that they share one build of stq's library.
cargo build --release --locked -p stq -p xtask
target_dir=${CARGO_TARGET_DIR:-target}
# `--prepare`: cargo-deb and the release build only (.ci/run makes them beside its
# own builds and tests, from its start, then builds the package from them).
[[ ${1:-} == --prepare ]] && exit 0

assets=target/deb-assets
rm -rf "$assets"
# `cargo xtask deb-assets`, the release build just made.
"$target_dir/release/xtask" deb-assets "$assets"
# -n: no name or time stamp inside, so the same sources make the same files.
gzip -9n "$assets"/man/*.1
gzip -9n <CHANGELOG.md >"$assets/changelog.gz"
# The copyright file: stq's licence, then the notice of uPlot, which the binary
# carries for the overview page (src/http/ui/vendor/).
{
    cat LICENSE
    printf '\n---\n\nThe overview page bundles uPlot (src/http/ui/vendor/README.md names its\nversion), under this licence:\n\n'
    cat src/http/ui/vendor/LICENSE
} >"$assets/copyright"

# --strip: [profile.release] keeps line tables for profiling; the package does not.
cargo deb --no-build --strip --locked "$@"
