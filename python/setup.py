"""The one build step setuptools cannot do alone: compile the native library.

`pip install ./python` (from the repository) runs `cargo build --release --lib` on the
crate one directory up and copies its cdylib, libticketing.so, into the package next
to the Python files. The package itself is pure Python (ctypes): no compiler, no
Python headers, no extension module.

TICKETING_PREBUILT_LIBRARY=/path/to/libticketing.so skips cargo and bundles that file
instead (a build from an sdist, where the crate is not next to this file).
"""

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
LIBRARY = "libticketing.dylib" if sys.platform == "darwin" else "libticketing.so"


def native_library() -> Path:
    """Builds the crate's cdylib with cargo and returns its path."""
    prebuilt = os.environ.get("TICKETING_PREBUILT_LIBRARY")
    if prebuilt:
        return Path(prebuilt)
    manifest = HERE.parent / "Cargo.toml"
    if not manifest.is_file():
        sys.exit(
            f"ticketing: {manifest} not found: install from the repository (pip install ./python), "
            "or set TICKETING_PREBUILT_LIBRARY to a built libticketing.so"
        )
    cargo = os.environ.get("CARGO", "cargo")
    command = [
        cargo, "build", "--release", "--lib", "--locked",
        "--manifest-path", str(manifest),
        "--message-format=json-render-diagnostics",
    ]
    print("ticketing: " + " ".join(command), file=sys.stderr)
    try:
        # Diagnostics and progress go to stderr; stdout carries cargo's JSON messages.
        result = subprocess.run(command, stdout=subprocess.PIPE, check=False)
    except FileNotFoundError:
        sys.exit(f"ticketing: {cargo} not found: building the package needs a Rust toolchain (rustup)")
    if result.returncode != 0:
        sys.exit(f"ticketing: cargo failed with exit status {result.returncode}")
    for line in result.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or message["target"]["name"] != "ticketing":
            continue
        for filename in message.get("filenames", []):
            if filename.endswith(LIBRARY):
                return Path(filename)
    sys.exit(f"ticketing: cargo built no {LIBRARY}")


class BuildPy(build_py):
    """build_py, plus the native library copied into the built package."""

    def run(self) -> None:
        super().run()
        library = native_library()
        target = Path(self.build_lib) / "ticketing" / LIBRARY
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(library, target)
        # The release profile keeps line tables for Rust backtraces; the installed copy
        # does not need them (best effort).
        if shutil.which("strip"):
            subprocess.run(["strip", "--strip-debug", str(target)], check=False)


class NativeDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not as pure Python."""

    def has_ext_modules(self) -> bool:
        return True


# setuptools builds in the source tree by default (build/, ticketing.egg-info/): `pip
# install ./python` would leave both in the checkout. They go to a directory of their
# own, removed when the build ends.
SCRATCH = tempfile.mkdtemp(prefix="ticketing-build-")
atexit.register(shutil.rmtree, SCRATCH, ignore_errors=True)

setup(
    cmdclass={"build_py": BuildPy},
    distclass=NativeDistribution,
    options={"build": {"build_base": SCRATCH}, "egg_info": {"egg_base": SCRATCH}},
)
