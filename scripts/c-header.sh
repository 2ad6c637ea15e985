#!/usr/bin/env bash
# Generates include/ticketing.h from the C ABI's Rust declarations (src/capi) with
# cbindgen, at the version below; `--check` compares instead of writing (exit 1 when
# they differ). tests/c_header.rs runs the check.
set -euo pipefail
cd "$(dirname "$0")/.."

CBINDGEN_VERSION=0.29.4
if ! command -v cbindgen >/dev/null 2>&1 || [ "$(cbindgen --version)" != "cbindgen $CBINDGEN_VERSION" ]; then
    echo "cbindgen $CBINDGEN_VERSION is needed: cargo install cbindgen --locked --version $CBINDGEN_VERSION" >&2
    exit 2
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# cbindgen warns about every item of src/capi that C never sees; errors still fail.
cbindgen --quiet --config cbindgen.toml --output "$out" src/capi/mod.rs
if [ "${1:-}" = "--check" ]; then
    if ! diff -u include/ticketing.h "$out"; then
        echo "include/ticketing.h is not what src/capi declares: run scripts/c-header.sh" >&2
        exit 1
    fi
else
    cp "$out" include/ticketing.h
fi
