"""Reviewing the code in an answer by rules, before anything runs (for `code_runner`)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from loop_agents_checks.sandbox import SCRIPT_NAME

__all__ = [
    "PYTHON_LANGUAGES",
    "CodeReview",
    "extract_python_blocks",
    "review_code",
    "unclosed_python_block",
]

# code fence info strings that count as Python; "" is an unlabeled fence
PYTHON_LANGUAGES = frozenset({"", "python", "python3", "py", "py3"})

_FENCE = re.compile(
    r"^[ \t]{0,3}(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)\n"
    r"(?P<code>.*?)"
    r"^[ \t]{0,3}(?P=fence)[ \t]*$",
    re.MULTILINE | re.DOTALL,
)

_OPENING_FENCE = re.compile(
    r"^[ \t]{0,3}(`{3,}|~{3,})[ \t]*(python3?|py3?)?[ \t]*$", re.MULTILINE | re.IGNORECASE
)


def extract_python_blocks(text: str) -> list[str]:
    r"""The code of each fenced block of a Markdown answer labeled Python or unlabeled.

    Example:
        ```python
        answer = "Here:\n```python\nprint(1 + 1)\n```\nand the output:\n```text\n2\n```"
        assert extract_python_blocks(answer) == ["print(1 + 1)\n"]
        ```
    """
    blocks: list[str] = []
    for match in _FENCE.finditer(text):
        info = match.group("info").strip().split(maxsplit=1)
        language = info[0].lower() if info else ""
        if language in PYTHON_LANGUAGES:
            blocks.append(match.group("code"))
    return blocks


def unclosed_python_block(text: str, *, labeled: bool = False) -> str | None:
    r"""The code after a Python block's opening fence that is never closed, else ``None``.

    An answer cut off at the model's token limit often ends inside its code block.

    Args:
        text: The answer.
        labeled: Only a fence that names Python (an unlabeled one may be a stray closing
            fence followed by prose).

    Example:
        ```python
        cut = "Here:\n```python\ndef f(x):\n    return x +"
        assert unclosed_python_block(cut) == "def f(x):\n    return x +"
        assert unclosed_python_block("```python\nprint(1)\n```") is None
        ```
    """
    end = max((match.end() for match in _FENCE.finditer(text)), default=0)
    opening = _OPENING_FENCE.search(text, end)
    if opening is None or (labeled and not opening.group(2)):
        return None
    return text[opening.end() :].removeprefix("\n")


@dataclass(frozen=True)
class CodeReview:
    """The review: ``code`` (of the answer's one Python block, else ``None``), ``problems``.

    Each problem is one sentence addressed to the coder; none when the code may run.
    """

    code: str | None
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Whether the code passed the review and may run."""
        return self.code is not None and not self.problems


def review_code(text: str, *, require_print: bool = True) -> CodeReview:
    r"""Review an answer by rules: exactly one Python block that parses and prints its result.

    Args:
        text: The answer.
        require_print: Require a call of ``print`` (or ``sys.stdout.write``) in the code.

    Example:
        ```python
        review = review_code("```python\nx = 1 + 1\n```")
        assert review.problems == (
            "The program prints nothing: print the result with print(...).",
        )
        ```
    """
    blocks = extract_python_blocks(text)
    if len(blocks) != 1:
        if not blocks and _OPENING_FENCE.search(_FENCE.sub("", text)):
            problem = (
                "The Python code block is not closed (the answer may have been cut off): "
                "write a short program and end the block with ```."
            )
        elif not blocks:
            problem = (
                "The answer has no Python code block: put the whole program in one "
                "```python ... ``` block."
            )
        else:
            problem = (
                f"The answer has {len(blocks)} Python code blocks; put the whole program in "
                f"exactly one ```python ... ``` block."
            )
        return CodeReview(None, (problem,))
    code = blocks[0]
    if not code.strip():
        return CodeReview(code, ("The Python code block is empty: write the program in it.",))
    try:
        tree = ast.parse(code, filename=SCRIPT_NAME)
    except SyntaxError as exc:
        where = f"line {exc.lineno}" if exc.lineno else "the code"
        return CodeReview(
            code,
            (f"The program does not compile: SyntaxError at {where}: {exc.msg.rstrip('.?!')}.",),
        )
    if require_print and not _prints(tree):
        return CodeReview(code, ("The program prints nothing: print the result with print(...).",))
    return CodeReview(code)


def _prints(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id in {"print", "pprint"}:
            return True
        if isinstance(func, ast.Attribute) and func.attr in {"write", "print", "pprint"}:
            return True
    return False
