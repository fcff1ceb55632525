"""Every code block of the documentation runs, or says why it does not.

The pages are README.md and docs/**/*.md. Each fenced block is one of:

- ```` ```python ````: run, in order, in one namespace per page (a block may use what an
  earlier block of its page defined), in a temporary folder, with a time limit, offline
  (connections other than loopback are refused, the model settings are unset). A block
  may use top-level ``await``.
- ```` ```bash ````, ```` ```sh ````, ```` ```shell ````: run with bash (``set -e``), the
  virtual environment's ``bin`` first on ``PATH``, in a temporary folder, offline; it must
  exit 0. ```` ```console ````: the lines that start with ``$ `` are run that way (the
  other lines are the output shown, not compared).
- ```` ```json ````, ```` ```toml ````, ```` ```yaml ````: parsed.
- no language, or ```` ```text ````: output or a picture, not code; nothing runs it.

A block that cannot run here (it needs an API key, installs packages, starts a server,
takes minutes) carries a mark on the line before it::

    <!-- docs-test: needs OPENAI_API_KEY -->

and is reported as skipped with that reason; a marked Python block is still compiled, so
a syntax error fails. A block whose content is a snippet (``--8<-- "examples/x.py"``) is
checked as the file it includes. An unmarked block that fails, or a block of another
language without a mark, fails its page's test, which names the file and the line.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tomllib
import traceback
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *(ROOT / "libs").glob("*/README.md"), *(ROOT / "docs").rglob("*.md")]
)
BLOCK_SECONDS = 60
"""The most one block may take; the pages' blocks take well under a second each."""

PYTHON = {"python", "py", "python3"}
SHELL = {"bash", "sh", "shell"}
CONSOLE = {"console"}
DATA = {"json", "toml", "yaml", "yml"}
NOT_CODE = {"", "text", "txt", "output"}

MARK = re.compile(r"^\s*<!--\s*docs-test:\s*(?P<reason>.+?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*?)\s*$")
SNIPPET = re.compile(r"""^\s*-{1,}8<-{1,}\s+["'](?P<path>[^"']+)["']\s*$""")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # the 1-based line of the opening fence
    lang: str
    code: str
    mark: str | None  # the reason of a `<!-- docs-test: ... -->` mark, or None

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"


def parse_blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, in order, with the mark on the line before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        lang = (opening["info"].split() or [""])[0].lower().lstrip(".{")
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(previous)
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                break
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        else:
            raise AssertionError(f"{path}:{i + 1}: the block is never closed")
        code = expand_snippets("\n".join(body) + "\n", path, i + 1)
        blocks.append(Block(path, i + 1, lang, code, mark["reason"] if mark else None))
        i = j + 1
    return blocks


def expand_snippets(code: str, path: Path, line: int) -> str:
    """Replace ``--8<-- "file"`` lines (pymdownx.snippets, base path: the repository)."""
    out: list[str] = []
    for text in code.splitlines():
        snippet = SNIPPET.match(text)
        if snippet is None:
            out.append(text)
            continue
        name, *lines = snippet["path"].split(":")
        included = ROOT / name
        assert included.is_file(), f"{path}:{line}: no such snippet {name}"
        content = included.read_text(encoding="utf-8").splitlines()
        if lines:
            start = int(lines[0] or 1)
            end = int(lines[1]) if len(lines) > 1 and lines[1] else len(content)
            content = content[start - 1 : end]
        out.extend(content)
    return "\n".join(out) + "\n"


def _all_blocks() -> list[Block]:
    return [block for page in PAGES for block in parse_blocks(page)]


# --- running the blocks -------------------------------------------------------------------


class BlockTimeout(Exception):
    pass


@contextlib.contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def expire(signum: int, frame: FrameType | None) -> None:
        raise BlockTimeout(f"ran longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _loopback_only(address: Any) -> None:
    if isinstance(address, (str, bytes)):  # AF_UNIX
        return
    host = address[0]
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).is_loopback:
            return
    if host == "localhost":
        return
    raise OSError(f"the docs tests run offline: a connection to {host!r} was refused")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No model settings, no connection beyond loopback, a fresh current folder."""
    for name in list(os.environ):
        if name.startswith(("OPENAI_", "LOOP_AGENTS_", "LANGSMITH_", "LANGCHAIN_")):
            monkeypatch.delenv(name)
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(self: socket.socket, address: Any) -> None:
        _loopback_only(address)
        real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _loopback_only(address)
        return real_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def run_python(block: Block, namespace: dict[str, Any]) -> None:
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    code = compile(block.code, block.where, "exec", flags=flags, dont_inherit=True)
    with (
        time_limit(BLOCK_SECONDS),
        contextlib.redirect_stdout(io.StringIO()),
        warnings.catch_warnings(),
    ):
        # a page that imports a name from where it used to be shows its readers a
        # DeprecationWarning: an error here
        warnings.filterwarnings("error", message=r".*loop_agents", category=DeprecationWarning)
        if code.co_flags & inspect.CO_COROUTINE:
            asyncio.run(eval(code, namespace))
        else:
            exec(code, namespace)


def shell_script(block: Block) -> str:
    if block.lang in CONSOLE:
        commands = [line[2:] for line in block.code.splitlines() if line.startswith("$ ")]
        assert commands, f"{block.where}: a console block without a `$ ` command line"
        return "\n".join(commands) + "\n"
    return block.code


def run_shell(block: Block, cwd: Path) -> None:
    bin_dir = str(Path(sys.executable).parent)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "LOOP_AGENTS_", "LANGSMITH_", "LANGCHAIN_"))
    }
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "OPENAI_BASE_URL": "http://127.0.0.1:9/v1",  # nothing listens: no model call leaves
        "NO_COLOR": "1",
    }
    examples = cwd / "examples"  # the commands are written for a clone's top folder
    if not examples.exists():
        examples.symlink_to(ROOT / "examples", target_is_directory=True)
    done = subprocess.run(
        ["bash", "-e", "-c", shell_script(block)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=BLOCK_SECONDS,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, (
        f"exit status {done.returncode}\n--- stdout\n{done.stdout[-2000:]}"
        f"\n--- stderr\n{done.stderr[-2000:]}"
    )


def check_data(block: Block) -> None:
    if block.lang == "json":
        json.loads(block.code)
    elif block.lang == "toml":
        tomllib.loads(block.code)
    else:
        import yaml

        yaml.safe_load(block.code)


# --- the tests ----------------------------------------------------------------------------


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_page_blocks_run(page: Path, offline: Path) -> None:
    """The page's unmarked blocks run (Python in order, in one namespace), or it fails."""
    namespace: dict[str, Any] = {"__name__": "__docs__"}
    failures: list[str] = []
    for block in parse_blocks(page):
        if block.mark is not None:
            continue  # test_marked_blocks reports them
        try:
            if block.lang in PYTHON:
                run_python(block, namespace)
            elif block.lang in SHELL | CONSOLE:
                run_shell(block, offline)
            elif block.lang in DATA:
                check_data(block)
            elif block.lang not in NOT_CODE:
                raise AssertionError(
                    f"a ```{block.lang} block is neither run nor marked: mark it with "
                    "<!-- docs-test: REASON --> on the line before it"
                )
        except Exception:
            failures.append(f"{block.where} (```{block.lang}):\n{traceback.format_exc(limit=-3)}")
            if block.lang in PYTHON:
                break  # later blocks of the page may build on this one
    assert not failures, "\n".join(failures)


MARKED = [block for block in _all_blocks() if block.mark is not None]


@pytest.mark.parametrize("block", MARKED, ids=lambda b: b.where)
def test_marked_blocks(block: Block) -> None:
    """A marked block is skipped with its reason; a Python one must still compile."""
    if block.lang in PYTHON:
        compile(block.code, block.where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    elif block.lang in DATA:
        check_data(block)
    pytest.skip(block.mark)


def test_parser_reads_marks_fences_and_snippets(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "Intro\n\n<!-- docs-test: needs OPENAI_API_KEY -->\n```python\nprint(1)\n```\n\n"
        "- a list item:\n\n    ```bash\n    echo hi\n    ```\n\n"
        "````text\n```\nnested\n```\n````\n",
        encoding="utf-8",
    )
    blocks = parse_blocks(page)
    assert [(b.lang, b.line, b.mark) for b in blocks] == [
        ("python", 4, "needs OPENAI_API_KEY"),
        ("bash", 10, None),
        ("text", 14, None),
    ]
    assert blocks[1].code == "echo hi\n"
    assert blocks[2].code == "```\nnested\n```\n"
    snippet = expand_snippets('--8<-- "examples/prompts.py"\n', page, 1)
    assert snippet == (ROOT / "examples" / "prompts.py").read_text(encoding="utf-8")


def test_an_unmarked_block_that_fails_names_its_line(tmp_path: Path, offline: Path) -> None:
    block = Block(tmp_path / "x.md", 7, "python", "raise RuntimeError('boom')\n", None)
    with pytest.raises(RuntimeError, match="boom") as caught:
        run_python(block, {})
    assert any(str(entry.path).endswith("x.md:7") for entry in caught.traceback)


def test_blocks_run_offline(offline: Path) -> None:
    block = Block(
        ROOT / "x.md",
        1,
        "python",
        "import socket\nsocket.create_connection(('192.0.2.1', 80), timeout=1)\n",
        None,
    )
    with pytest.raises(OSError, match="offline"):
        run_python(block, {})


def test_a_block_that_hangs_is_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "BLOCK_SECONDS", 1)
    block = Block(
        ROOT / "x.md", 1, "python", "import time\nwhile True:\n    time.sleep(0.01)\n", None
    )
    with pytest.raises(BlockTimeout):
        run_python(block, {})


def test_ci_runs_the_readmes_development_commands() -> None:
    """What the README tells a newcomer to run is what CI proves works on a clean clone."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Development", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make [\w-]+)", section, flags=re.MULTILINE)
    assert "make test" in commands, "the README's Development section names no test command"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    run = {line.strip() for line in ci.splitlines() if not line.lstrip().startswith("#")}
    missing = [c for c in commands if c not in run]
    assert not missing, f".ci/run does not run the README's {missing}"


FIRST_SCREEN = 40
"""The README's lines a newcomer sees before scrolling."""


def test_the_readmes_first_screen_sets_everything_up_and_shows_an_example() -> None:
    """What it is, the two commands that set everything up, then an example that runs."""
    blocks = [b for b in parse_blocks(ROOT / "README.md") if b.line <= FIRST_SCREEN]
    setup = blocks[0]
    assert setup.lang in SHELL, setup.where
    commands = [line.split("#", 1)[0].strip() for line in setup.code.splitlines()]
    assert commands == ["make demo", "make test"], setup.where
    example = next(b for b in blocks if b.lang in PYTHON)
    assert example.mark is None, f"{example.where}: the first example must run offline"
    last_line = example.line + len(example.code.splitlines()) + 1  # its closing fence
    assert last_line <= FIRST_SCREEN, f"{example.where} ends at line {last_line}"


def test_no_readme_command_needs_a_file_that_a_fresh_clone_lacks() -> None:
    """A wheel in dist/ exists only after `make dist`: never offered before it is said."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for found in re.finditer(r"pip install dist/", readme):
        assert "make dist" in readme[: found.start()], "`pip install dist/...` before `make dist`"


def test_the_readme_names_everything_make_test_installs_and_how_to_skip_the_browser() -> None:
    script = (ROOT / "scripts" / "install-test-servers.sh").read_text(encoding="utf-8")
    found = re.search(r"^\s*wanted=\(([a-z+ ]+)\)", script, flags=re.MULTILINE)  # the default
    assert found is not None
    words = {
        "postgresql": "PostgreSQL",
        "g++": "C++ compiler",
        "bubblewrap": "bubblewrap",
        "chromium": "Chromium",
    }
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = " ".join(readme.split("## Development", 1)[1].split())
    for package in found.group(1).split():
        assert words[package] in section, package
    assert "the bundled offline model (`make local`" in section
    assert "`make test BROWSER_TESTS=no` leaves Chromium out" in section
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "and not browser" in makefile  # what BROWSER_TESTS=no runs
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-m", "not browser", "tests/test_html_browser.py"],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT / "libs" / "evals",
    )  # fmt: skip
    assert "deselected" in collected.stdout, collected.stdout
    assert "test_html_browser.py::" not in collected.stdout  # every browser test is left out
