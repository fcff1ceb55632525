"""The article's program, unchanged but for the import of its prompts, runs against a server."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.conftest import ROOT, env_without_model_settings
from tests.scripted_openai import ScriptedOpenAI, Structured


def seed_program() -> str:
    """Section 1's program as printed in the article, plus the import of its prompts."""
    text = (ROOT / "tests" / "data" / "seed_001_program.py").read_text(encoding="utf-8")
    if sys.version_info < (3, 12):
        # the article's f-string nests double quotes, which needs Python 3.12
        text = text.replace('{review["score"] }', "{review['score'] }")
    return "from prompts import composer_system_message, reviewer_system_message, prompt\n" + text


def test_article_program_runs_unchanged(tmp_path):
    program = tmp_path / "article.py"
    program.write_text(seed_program(), encoding="utf-8")
    server = ScriptedOpenAI(
        [
            "【相见欢】当年初见斜阳，过横塘。",
            Structured({"score": 70, "feedback": "格律未合。"}),
            "【相见欢】当年一笑相逢。过淇东。",
            Structured({"score": 81, "feedback": "情绪线索尚明。"}),
        ]
    )
    env = env_without_model_settings()
    with server.serve() as base_url:
        env |= {
            "OPENAI_BASE_URL": base_url,
            "OPENAI_API_KEY": "sk-test",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "examples"), str(ROOT)]),
        }
        proc = subprocess.run(
            [sys.executable, str(program)],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert out.count("Human Message") == 2  # the request and one feedback turn
    assert out.count("Ai Message") == 2
    assert "格律未合。\n\n综合得分：70" in out
    assert "综合得分：81" not in out  # the accepting review is not appended
    assert len(server.requests) == 4
    assert server.requests[0]["model"] == "gpt-5.4-mini"
