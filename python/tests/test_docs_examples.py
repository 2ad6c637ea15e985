"""The Python examples of docs/python.md's "Counted and multi-key holds" run as written
against a real server (its address for 127.0.0.1:5225, TICKETING_AUTH_TOKEN its
secret), each in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

import ticketing
from conftest import SECRET, Server

_DOC = Path(__file__).resolve().parents[2] / "docs" / "python.md"
_PACKAGE = str(Path(ticketing.__file__).resolve().parent.parent)


def examples(section: str) -> List[str]:
    """The ```python blocks of `section` (a level-2 heading) of docs/python.md."""
    text = _DOC.read_text()
    start = text.index(f"\n## {section}\n")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end != -1 else len(text)]
    return [block.split("```", 1)[0] for block in body.split("```python\n")[1:]]


HOLDS = examples("Counted and multi-key holds")


def test_the_holds_section_has_a_blocking_and_an_asyncio_example() -> None:
    assert len(HOLDS) == 2 and "ticketing.aio" in HOLDS[1]


@pytest.mark.parametrize("index, expected", [
    (0, ["holding ['seat:12:1', 'seat:12:2', 'seat:12:3', 'seat:12:4'] under token",
         "Pool(capacity=100, in_use=2, holds=1, waiters=0", "selling 2 tickets under token"]),
    (1, ["Pool(capacity=100, in_use=2, holds=1", "selling under token"]),
])
def test_an_example_runs_as_written(server: Server, index: int, expected: List[str]) -> None:
    assert server.addr is not None
    script = HOLDS[index]
    assert "127.0.0.1:5225" in script
    env = dict(os.environ, TICKETING_AUTH_TOKEN=SECRET)
    env["PYTHONPATH"] = _PACKAGE + os.pathsep + env.get("PYTHONPATH", "")
    run = subprocess.run([sys.executable, "-c", script.replace("127.0.0.1:5225", server.addr)], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    for line in expected:
        assert line in run.stdout, (line, run.stdout)
