"""`command_check`: a shell command judges each answer; exit status 0 accepts it.

It runs with your permissions, under the sandbox's supervisor (nothing it starts outlives
it): it is not a sandbox; `code_runner` is. ``docs/cli.md`` (``--check``) is the user's guide.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from langchain_core.runnables import Runnable, RunnableConfig

from loop_agents.evaluators.base import check_name, make_evaluator
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents_checks.sandbox.cleanup import remove_tree
from loop_agents_checks.sandbox.result import RunResult
from loop_agents_checks.sandbox.runner import in_thread, run_supervised
from loop_agents_checks.sandbox.shell_command import command_problem
from loop_agents_checks.sandbox.text_files import write_utf8

ANSWER_VARIABLE = "LOOP_AGENTS_ANSWER"  # holds the path of the answer's file
PLACEHOLDER = "{answer_file}"  # replaced in the command by that path, quoted where it stands
OUTPUT_BYTES = 1 << 20  # the most bytes of a check's output kept in memory (head and tail)
# file suffixes by a code block's language; other answers are written to .txt
SUFFIXES = {
    "python": ".py", "py": ".py", "python3": ".py", "javascript": ".js", "js": ".js",
    "typescript": ".ts", "ts": ".ts", "bash": ".sh", "sh": ".sh", "shell": ".sh",
    "zsh": ".sh", "json": ".json", "rust": ".rs", "go": ".go", "c": ".c", "cpp": ".cpp",
    "c++": ".cpp", "java": ".java", "ruby": ".rb", "rb": ".rb", "html": ".html",
    "css": ".css", "sql": ".sql", "yaml": ".yaml", "yml": ".yaml", "toml": ".toml",
    "markdown": ".md", "md": ".md",
}  # fmt: skip

_SECRET_PARTS = frozenset({"KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIALS"})
_OPENING = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})\s*(?P<info>[^\s`]*)[^`]*$")


def answer_for_check(text: str) -> tuple[str, str]:
    r"""The part of an answer the check sees, and the suffix of its file.

    The body of the fenced code block when the answer holds exactly one (an unclosed
    fence runs to the end), with ``.py`` etc. for its language; else the whole text.

    Example:
        ```python
        answer_for_check("Here:\\n```python\\nprint(1)\\n```\\n")  # ('print(1)\\n', '.py')
        ```
    """
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        opening = _OPENING.match(lines[i].rstrip("\r\n"))
        if opening is None:
            i += 1
            continue
        fence = opening["fence"]
        closing = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        j = i + 1
        while j < len(lines) and not closing.match(lines[j].rstrip("\r\n")):
            j += 1
        blocks.append((opening["info"].lower(), "".join(lines[i + 1 : j])))
        i = j + 1
    if len(blocks) == 1:
        language, body = blocks[0]
        return body, SUFFIXES.get(language, ".txt")
    return text, ".txt"


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without the variables that look like secrets (``*_API_KEY``, ``*_TOKEN``...).

    Example:
        ```python
        without_secrets({"PATH": "/bin", "OPENAI_API_KEY": "sk-..."})  # {'PATH': '/bin'}
        ```
    """
    return {
        name: value
        for name, value in environ.items()
        if not _SECRET_PARTS & set(name.upper().replace("-", "_").split("_"))
    }


def _quote_state(command: str, end: int) -> str:
    """The shell quoting in force at ``command[end]``: ``""``, ``'"'`` or ``"'"``."""
    state = ""
    i = 0
    while i < end:
        char = command[i]
        if state == "'":
            if char == "'":
                state = ""
        elif char == "\\":
            i += 1  # the next character is escaped (outside quotes and inside "...")
        elif state == '"':
            if char == '"':
                state = ""
        elif char in "'\"":
            state = char
        i += 1
    return state


def with_answer_file(command: str, path: str) -> str:
    r"""``command`` with each ``{answer_file}`` replaced by ``path``, one shell word wherever.

    Bare, it is quoted when it needs it; inside the command's double quotes, ``\$`"`` are
    escaped; inside its single quotes, those are closed around the quoted path.

    Example:
        ```python
        assert with_answer_file('cat "{answer_file}"', "/tmp/a b/x") == 'cat "/tmp/a b/x"'
        assert with_answer_file("cat {answer_file}", "/tmp/a b/x") == "cat '/tmp/a b/x'"
        ```
    """
    pieces: list[str] = []
    start = 0
    while (found := command.find(PLACEHOLDER, start)) >= 0:
        pieces.append(command[start:found])
        state = _quote_state(command, found)
        if state == '"':
            pieces.append(re.sub(r'([\\$`"])', r"\\\1", path))
        elif state == "'":
            pieces.append("'" + shlex.quote(path) + "'")
        elif re.fullmatch(r"[A-Za-z0-9_./+-]+", path):
            pieces.append(path)
        else:
            pieces.append(shlex.quote(path))
        start = found + len(PLACEHOLDER)
    pieces.append(command[start:])
    return "".join(pieces)


@dataclass(frozen=True)
class _Check:
    """The command, its options and both ways of running it."""

    command: str
    timeout: float
    cwd: Path | None
    max_feedback_chars: int
    env: dict[str, str] | None = None

    def _prepare(self, folder: str, answer: str) -> tuple[list[str], dict[str, str]]:
        body, suffix = answer_for_check(answer)
        path = Path(folder) / f"answer{suffix}"
        write_utf8(path, body)
        env = self.env if self.env is not None else without_secrets(os.environ)
        env = {**env, ANSWER_VARIABLE: str(path)}
        return ["/bin/sh", "-c", with_answer_file(self.command, str(path))], env

    def run(self, answer: str, cancel: threading.Event | None = None) -> RunResult:
        folder = tempfile.mkdtemp(prefix="loop_agents_check_")
        try:
            argv, env = self._prepare(folder, answer)
            return run_supervised(
                argv,
                cwd=str(self.cwd) if self.cwd is not None else None,
                env=env,
                timeout=self.timeout,
                max_output=OUTPUT_BYTES,
                cancel=cancel,
            )
        finally:
            remove_tree(folder)

    async def arun(self, answer: str) -> RunResult:
        # cancelled (Ctrl-C): the command and everything it started are killed
        return await in_thread(lambda cancel: self.run(answer, cancel))

    def verdict(self, run: RunResult) -> LoopEvaluation:
        if run.ok:
            return {"stop": True, "feedback": f"The check `{self.command}` passed."}
        if run.timed_out:
            what = f"did not finish within {self.timeout:g} s and was stopped"
        elif run.exit_code < 0:
            try:
                name = signal.Signals(-run.exit_code).name
            except ValueError:
                name = f"signal {-run.exit_code}"
            what = f"was killed by {name}"
        else:
            what = f"failed with exit status {run.exit_code}"
        output = run.stdout.rstrip()
        if not output:
            shown = "It printed nothing."
        elif len(output) <= self.max_feedback_chars and not run.truncated:
            shown = f"Its output:\n{output}"
        else:
            cut = max(len(output) - self.max_feedback_chars, 0)
            earlier = "earlier output cut" if run.truncated else f"{cut} earlier characters cut"
            shown = f"The end of its output ({earlier}):\n" + output[cut:]
        return {"stop": False, "feedback": f"The check `{self.command}` {what}. {shown}"}


def command_check(
    command: str,
    *,
    timeout: float = 60.0,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    max_feedback_chars: int = 2000,
    name: str = "check",
) -> Runnable[LoopContext, LoopEvaluation]:
    """An evaluator that runs a shell command on each answer: exit status 0 accepts it.

    The answer (`answer_for_check`) is written to a fresh file (``answer.py``, ...,
    ``answer.txt``) whose path is in ``$LOOP_AGENTS_ANSWER`` and replaces a literal
    ``{answer_file}`` in ``command``; ``/bin/sh`` runs it in ``cwd``. Any other status, a
    signal or ``timeout`` sends the end of its output (stdout and stderr) back as feedback.
    Every process it started is killed when it ends; at most `OUTPUT_BYTES` are kept.

    Args:
        command: A shell command, e.g. ``"python {answer_file} | grep -qx 42"``.
        timeout: Seconds the command may run (default 60).
        cwd: The folder it runs in; default the current one.
        env: Its environment; default this process's without secret-looking variables
            (see `without_secrets`). ``LOOP_AGENTS_ANSWER`` is added either way.
        max_feedback_chars: The most characters of output sent back as feedback.
        name: The evaluator's name in records and traces.

    Returns:
        A runnable evaluator with a sync and an async path.

    Raises:
        TypeError: ``command`` or ``max_feedback_chars`` is of the wrong type.
        ValueError: the command is empty, does not parse, or its program is not found;
            or an option is out of range.

    Example:
        ```python
        from loop_agents import all_of, create_loop_agent, llm_judge
        from loop_agents_checks import command_check

        tests = command_check("cp {answer_file} fizz.py && pytest -q test_fizz.py")
        loop = create_loop_agent(coder, all_of(tests, llm_judge(model, rubric, threshold=80)))
        ```
    """
    if not isinstance(command, str):
        raise TypeError(f"command must be a shell command string; got {command!r:.60}")
    problem = command_problem(command, cwd)
    if problem is not None:
        raise ValueError(problem)
    seconds = finite_float(timeout)
    if seconds is None or seconds <= 0:
        raise ValueError(
            f"timeout must be a finite number of seconds > 0; got {describe_number(timeout)}"
        )
    if isinstance(max_feedback_chars, bool) or not isinstance(max_feedback_chars, int):
        raise TypeError(f"max_feedback_chars must be an int; got {max_feedback_chars!r}")
    if max_feedback_chars < 1:
        raise ValueError(f"max_feedback_chars must be >= 1; got {max_feedback_chars}")
    folder = Path(cwd) if cwd is not None else None
    if folder is not None and not folder.is_dir():
        raise ValueError(f"cwd {str(cwd)!r} is not a folder")
    env = dict(env) if env is not None else None
    check = _Check(command, float(timeout), folder, max_feedback_chars, env)

    def evaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return check.verdict(check.run(context["last_response"].text))

    async def aevaluate(context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        return check.verdict(await check.arun(context["last_response"].text))

    criteria = (
        f"The answer must pass this check (a command that must exit with status 0): {command}"
    )
    return make_evaluator(check_name(name, "check"), evaluate, aevaluate, criteria=criteria)
