#!/usr/bin/env bash
# Builds a fully static x86_64 Linux `ticketing` binary (glibc, +crt-static), strips it,
# checks that it needs no shared library, and prints its path and size.
#
#   scripts/build-static.sh            # -> target/x86_64-unknown-linux-gnu/release/ticketing
#
# Why `--target`: with an explicit target, RUSTFLAGS apply only to the target
# artifacts; without it they would also apply to build scripts and proc-macros, which
# cannot be static (a proc-macro is a shared library loaded by rustc).
# The crate's library is also a cdylib (the C ABI, docs/c.md): a shared library cannot
# be built with +crt-static, so rustc skips that one crate type here and says so
# ("dropping unsupported crate type `cdylib`"); the binary does not need it.
# The last line of output is the binary's path, for scripts and tests.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET=x86_64-unknown-linux-gnu
BIN="target/$TARGET/release/ticketing"

RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
    cargo build --release --target "$TARGET" --bin ticketing >&2

# The release profile keeps line tables (debug = 1) for backtraces; the shipped binary
# does not need them.
strip "$BIN"

# Verify: no dynamic section needing anything, no interpreter.
if readelf -d "$BIN" 2>/dev/null | grep -q NEEDED; then
    echo "build-static: $BIN still needs shared libraries:" >&2
    readelf -d "$BIN" | grep NEEDED >&2
    exit 1
fi
if readelf -l "$BIN" | grep -q "Requesting program interpreter"; then
    echo "build-static: $BIN has a program interpreter (dynamic loader)" >&2
    exit 1
fi
if command -v file >/dev/null 2>&1; then
    file "$BIN" >&2
fi
SIZE=$(stat -c %s "$BIN")
echo "build-static: static binary, $SIZE bytes ($((SIZE / 1024)) KiB), $("$BIN" --version)" >&2
echo "$BIN"
