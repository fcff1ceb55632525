"""The console renderer: plain output of a recorded stream, terminal output, the stream helpers."""

from __future__ import annotations

import io
import itertools
from typing import Any

from langchain_core.messages import AIMessageChunk, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt
from rich.console import Console

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents_cli.console import LoopConsole, astream_to_console, stream_to_console
from loop_agents_cli.console.loop_console import format_seconds, section_header
from tests.fakes import FakeChat

REQUEST = HumanMessage("Write a haiku about rain.")


def agent_token(text: str, iteration: int) -> tuple[str, Any]:
    metadata = {
        "langgraph_node": "model",
        "loop_name": "poet",
        "loop_iteration": iteration,
        "loop_role": "agent",
    }
    return ("messages", (AIMessageChunk(content=text), metadata))


def event(type_: str, **fields: Any) -> tuple[str, Any]:
    return ("custom", {"type": type_, "loop": "poet", **fields})


# A loop of two iterations as the streams deliver it: the first answer streamed token by
# token, the second from an agent that does not stream; a judge's tokens and a feedback
# message (which the console leaves out) and another node's custom data in between.
RECORDED: list[tuple[str, Any]] = [
    event("iteration_started", iteration=1, max_iterations=3),
    agent_token("Rain on the ", 1),
    agent_token("roof\nsoft drums", 1),
    event(
        "agent_finished",
        iteration=1,
        answer="Rain on the roof\nsoft drums",
        seconds=2.5,
        input_tokens=30,
        output_tokens=12,
    ),
    ("messages", (AIMessageChunk(content='{"score": 6'), {"loop_role": "evaluator"})),
    event(
        "evaluation_finished",
        iteration=1,
        stop=False,
        score=62.0,
        feedback="Only two lines; a haiku has three.",
        evaluator="judge",
        decided_by=["judge"],
        seconds=1.25,
        input_tokens=40,
        output_tokens=9,
    ),
    ("messages", (HumanMessage("Only two lines; a haiku has three."), {"langgraph_node": "x"})),
    ("custom", {"progress": 0.5}),
    event("iteration_started", iteration=2, max_iterations=3),
    event(
        "agent_finished",
        iteration=2,
        answer="Rain on the roof\nsoft drums in the dark\nthe gutter sings",
        seconds=3.0,
        input_tokens=50,
        output_tokens=15,
    ),
    event(
        "evaluation_finished",
        iteration=2,
        stop=True,
        score=88.5,
        feedback="",
        evaluator="judge",
        decided_by=["judge"],
        seconds=1.0,
        input_tokens=60,
        output_tokens=4,
    ),
    event(
        "loop_finished",
        stop_reason="accepted",
        iterations=2,
        best_score=88.5,
        best_iteration=2,
        selected_iteration=2,
        answer="Rain on the roof\nsoft drums in the dark\nthe gutter sings",
    ),
]

EXPECTED_PLAIN = """\
iteration 1 of 3 · 0.0s elapsed · scores: none yet
--------------------Agent--------------------
Rain on the roof
soft drums

--------------------Evaluator--------------------
Only two lines; a haiku has three.
score 62 · another try (judge)

iteration 2 of 3 · 1m 20s elapsed · scores: 62
--------------------Agent--------------------
Rain on the roof
soft drums in the dark
the gutter sings

--------------------Evaluator--------------------
score 88.5 · accepted (judge)

--------------------Summary--------------------
+---------------------------------------------------+
| iteration |  score | seconds | tokens | outcome   |
|-----------+--------+---------+--------+-----------|
|         1 |     62 |     3.8 |     91 | continued |
|         2 | 88.5 * |     4.0 |    129 | accepted  |
+---------------------------------------------------+
stopped: accepted after 2 of 3 iterations · best score 88.5 (iteration 2) · 7.8s in all
"""


def plain_console() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=100), out


def test_plain_output_of_a_recorded_stream():
    console, out = plain_console()
    times = iter([0.0, 0.0, 80.0, 120.0])  # start, status 1, status 2, summary
    view = LoopConsole(console, clock=lambda: next(times))
    for mode, payload in RECORDED:
        view.handle(mode, payload)
    view.close()
    assert out.getvalue() == EXPECTED_PLAIN
    assert "\x1b" not in out.getvalue()
    assert view.finished is not None
    assert view.finished["stop_reason"] == "accepted"


def test_terminal_output_has_colour_and_the_same_text():
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system="standard")
    clock = itertools.count()
    view = LoopConsole(console, clock=lambda: float(next(clock)))
    for mode, payload in RECORDED:
        view.handle(mode, payload)
    view.close()
    text = out.getvalue()
    assert "\x1b[" in text  # styles (and the spinner's cursor control) in a terminal
    for line in ("Rain on the roof", "soft drums in the dark", "Only two lines"):
        assert line in text
    assert section_header("Agent") in text
    assert "+-----" not in text  # the terminal table is not the ASCII one


def test_tokens_of_an_iteration_are_not_printed_twice():
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    for mode, payload in RECORDED[:4]:
        view.handle(mode, payload)
    assert out.getvalue().count("Rain on the") == 1


def test_summary_names_a_selected_answer_that_is_not_the_last():
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    for i, score in ((1, 90.0), (2, 70.0)):
        view.handle(*event("iteration_started", iteration=i, max_iterations=2))
        view.handle(*agent_token(f"answer {i}", i))
        view.handle(
            *event(
                "agent_finished",
                iteration=i,
                answer=f"answer {i}",
                seconds=1.0,
                input_tokens=1,
                output_tokens=1,
            )
        )
        view.handle(
            *event(
                "evaluation_finished",
                iteration=i,
                stop=False,
                score=score,
                feedback="again",
                evaluator="judge",
                decided_by=["judge"],
                seconds=0.5,
                input_tokens=0,
                output_tokens=0,
            )
        )
    view.handle(
        *event(
            "loop_finished",
            stop_reason="max_iterations",
            iterations=2,
            best_score=90.0,
            best_iteration=1,
            selected_iteration=1,
            answer="answer 1",
        )
    )
    assert out.getvalue().splitlines()[-4:] == [
        "|         1 |  90 * |     1.5 |      2 | continued      |",
        "|         2 |    70 |     1.5 |      2 | max_iterations |",
        "+-------------------------------------------------------+",
        "stopped: max_iterations after 2 of 2 iterations · best score 90 (iteration 1) · "
        "the answer is iteration 1's · 3.0s in all",  # the table's seconds added up
    ]


def test_format_seconds():
    assert [format_seconds(s) for s in (0, 4.24, 59.94, 125.4)] == [
        "0.0s",
        "4.2s",
        "59.9s",
        "2m 05s",
    ]


def until_two(context: LoopContext) -> LoopEvaluation:
    iteration = context["iteration"]
    return {"stop": iteration >= 2, "feedback": f"feedback {iteration}", "score": 40 * iteration}


async def test_astream_to_console_renders_a_loop_and_returns_its_output():
    console, out = plain_console()
    loop = create_loop_agent(FakeChat.of("first draft", "second draft"), until_two, 3)
    result = await astream_to_console(
        loop, {"messages": [REQUEST]}, view=LoopConsole(console, clock=lambda: 0.0)
    )
    text = out.getvalue()
    assert text.count(section_header("Agent")) == 2
    assert text.count(section_header("Evaluator")) == 2
    assert text.index("first draft") < text.index("feedback 1") < text.index("second draft")
    assert "stopped: accepted after 2 of 3 iterations · best score 80 (iteration 2)" in text
    expected = await create_loop_agent(
        FakeChat.of("first draft", "second draft"), until_two, 3
    ).ainvoke({"messages": [REQUEST]})
    assert set(result) == set(expected)  # the output keys, not the internal ones
    assert result["last_response"].text == "second draft"


def test_stream_to_console_sync():
    console, out = plain_console()
    loop = create_loop_agent(FakeChat.of("first draft", "second draft"), until_two, 3)
    result = stream_to_console(
        loop, {"messages": [REQUEST]}, view=LoopConsole(console, clock=lambda: 0.0)
    )
    assert result["stop_reason"] == "accepted"
    assert "second draft" in out.getvalue()
    assert out.getvalue().rstrip().endswith("0.0s in all")


async def test_a_paused_run_says_so_and_resumes():
    def person(context: LoopContext) -> LoopEvaluation:
        reply = interrupt({"answer": context["last_response"].text})
        return {"stop": reply == "ok", "feedback": str(reply)}

    loop = create_loop_agent(
        FakeChat.of("first draft", "second draft"), person, 3, checkpointer=InMemorySaver()
    )
    config = {"configurable": {"thread_id": "review"}}
    console, out = plain_console()
    paused = await astream_to_console(
        loop, {"messages": [REQUEST]}, config, view=LoopConsole(console, clock=lambda: 0.0)
    )
    assert paused["__interrupt__"][0].value == {"answer": "first draft"}
    assert (
        out.getvalue()
        .rstrip()
        .endswith(
            "paused: the run waits for input (an interrupt); resume it on the same thread with "
            "Command(resume=...)"
        )
    )
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    await astream_to_console(loop, Command(resume="Shorter, please."), config, view=view)
    resumed = await astream_to_console(loop, Command(resume="ok"), config, view=view)
    assert resumed["stop_reason"] == "accepted"
    assert "__interrupt__" not in resumed
    text = out.getvalue()
    assert "Shorter, please." in text
    assert "second draft" in text
    assert "stopped: accepted after 2 of 3 iterations" in text


def rejected(
    iteration: int, score: float | None = 50.0, feedback: str = "again"
) -> list[tuple[str, Any]]:
    """One iteration whose answer the judge rejects."""
    return [
        event("iteration_started", iteration=iteration, max_iterations=2),
        agent_token(f"answer {iteration}", iteration),
        event(
            "agent_finished",
            iteration=iteration,
            answer=f"answer {iteration}",
            seconds=1.0,
            input_tokens=1,
            output_tokens=1,
        ),
        event(
            "evaluation_finished",
            iteration=iteration,
            stop=False,
            score=score,
            feedback=feedback,
            evaluator="judge",
            decided_by=["judge"],
            seconds=0.5,
            input_tokens=0,
            output_tokens=0,
        ),
    ]


def test_the_last_iteration_at_the_cap_is_not_called_another_try():
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    finished = event(
        "loop_finished",
        stop_reason="max_iterations",
        iterations=2,
        best_score=50.0,
        best_iteration=2,
        selected_iteration=2,
        answer="answer 2",
    )
    for mode, payload in [*rejected(1), *rejected(2), finished]:
        view.handle(mode, payload)
    view.close()
    text = out.getvalue()
    assert text.count("score 50 · another try (judge)") == 1  # after iteration 1 only
    assert "score 50 · not accepted (judge)" in text
    assert text.index("another try") < text.index("iteration 2 of 2") < text.index("not accepted")


def test_no_empty_sections():
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    view.handle(*event("iteration_started", iteration=1, max_iterations=2))
    assert section_header("Agent") not in out.getvalue()  # no header before the answer
    view.handle(
        *event(
            "agent_finished", iteration=1, answer="", seconds=1.0, input_tokens=1, output_tokens=0
        )
    )
    assert f"{section_header('Agent')}\n(the answer has no text)\n" in out.getvalue()
    view.handle(*event("iteration_started", iteration=2, max_iterations=2))
    view.failed("error")  # the run failed before the second answer came
    view.close()
    text = out.getvalue()
    assert text.count(section_header("Agent")) == 1
    # one iteration was done, as the loop's state (and `run --json`) counts it
    assert "stopped: error after 1 of 2 iterations" in text


def test_a_live_line_while_the_model_thinks():
    out = io.StringIO()
    console = Console(file=out, width=100, force_terminal=True, color_system="standard")
    view = LoopConsole(console, clock=lambda: 3.0)
    view.handle(*event("iteration_started", iteration=1, max_iterations=2))
    view.close()
    assert "iteration 1 of 2 · the agent is thinking · " in out.getvalue()


def test_restored_iterations_count_in_the_status_and_summary():
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    view.restore(
        [
            {
                "iteration": 1,
                "score": 40.0,
                "stop": False,
                "agent_seconds": 2.0,
                "evaluation_seconds": 1.0,
                "input_tokens": 10,
                "output_tokens": 5,
                "evaluator_input_tokens": 3,
                "evaluator_output_tokens": 2,
            }
        ],
        max_iterations=2,
    )
    finished = event(
        "loop_finished",
        stop_reason="max_iterations",
        iterations=2,
        best_score=50.0,
        best_iteration=2,
        selected_iteration=2,
        answer="answer 2",
    )
    for mode, payload in [*rejected(2), finished]:
        view.handle(mode, payload)
    text = out.getvalue()
    assert "iteration 2 of 2 · 0.0s elapsed · scores: 40" in text
    assert "|         1 |    40 |     3.0 |     20 | continued      |" in text


def test_a_failed_loop_counts_the_iterations_whose_answer_came():
    # as the loop's state counts them (`iteration`, and `run --json`'s "iterations")
    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    view.handle(*event("iteration_started", iteration=1, max_iterations=3))
    view.failed("error")  # the first model call failed: nothing was done
    assert "stopped: error after 0 of 3 iterations" in out.getvalue()

    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    view.handle(*event("iteration_started", iteration=1, max_iterations=3))
    view.handle(
        *event(
            "agent_finished", iteration=1, answer="a", seconds=1.0, input_tokens=1, output_tokens=1
        )
    )
    view.failed("judge_invalid")  # answered, never judged
    assert "stopped: judge_invalid after 1 of 3 iterations" in out.getvalue()

    console, out = plain_console()
    view = LoopConsole(console, clock=lambda: 0.0)
    view.restore([{"iteration": 1, "score": 40.0, "stop": False}], max_iterations=3)
    view.failed("error", iterations=2)  # a replay that knows the count
    assert "stopped: error after 2 of 3 iterations" in out.getvalue()


def test_a_saved_answer_judged_after_a_resume_is_shown_before_its_verdict():
    out = io.StringIO()
    view = LoopConsole(Console(file=out, width=100), clock=lambda: 0.0)
    view.restore(
        [{"iteration": 1, "score": 40.0, "stop": False, "agent_seconds": 1.0}], max_iterations=3
    )
    view.show_saved_answer(2, "the second answer")
    view.handle(
        "custom",
        {
            "type": "evaluation_finished", "loop": "l", "iteration": 2, "stop": True,
            "score": 90.0, "feedback": "Good.", "evaluator": "judge", "decided_by": [],
            "seconds": 1.0, "input_tokens": 0, "output_tokens": 0,
        },
    )  # fmt: skip
    view.close()
    text = out.getvalue()
    assert "iteration 2 of 3 · 0.0s elapsed · scores: 40 · resumed: the saved answer\n" in text
    assert text.index("the second answer") < text.index("Good.")
    assert text.index(section_header("Agent")) < text.index(section_header("Evaluator"))


def test_a_tidy_console_shows_a_small_model_s_text_without_debris():
    from loop_agents_cli.console.tidy import UNREADABLE

    out = io.StringIO()
    view = LoopConsole(Console(file=out, width=80), tidy=True)
    view.handle(
        "custom", {"type": "iteration_started", "loop": "l", "iteration": 1, "max_iterations": 1}
    )
    for piece in ["相见欢\n``", "`py\n无言", "独上西楼<|im_", "end|>\n``", "`"]:
        view.handle("messages", (AIMessageChunk(content=piece), {"loop_role": "agent"}))
    view.handle(
        "custom",
        {"type": "agent_finished", "loop": "l", "iteration": 1, "answer": "x", "seconds": 0.1,
         "input_tokens": 1, "output_tokens": 1},
    )  # fmt: skip
    view.handle(
        "custom",
        {"type": "evaluation_finished", "loop": "l", "iteration": 1, "stop": False,
         "score": 12.0, "feedback": "mopbeznbla;gwjrldh6,\n\nScore: 12/100 (needed: 80)",
         "evaluator": "judge", "decided_by": ["judge"], "seconds": 0.1, "input_tokens": 1,
         "output_tokens": 1},
    )  # fmt: skip
    view.print_answer("```\n相见欢\n```")
    view.close()
    text = out.getvalue()
    assert (
        f"{section_header('Agent')}\n相见欢\n无言独上西楼\n\n{section_header('Evaluator')}" in text
    )
    assert f"{UNREADABLE}\n\nScore: 12/100 (needed: 80)" in text
    assert f"{section_header('Answer')}\n相见欢\n" in text
    for debris in ("`", "<|", "mopbeznbla"):
        assert debris not in text


def test_a_command_s_console_never_wraps_a_pipe(monkeypatch):
    from loop_agents_cli.console.output import PIPE_WIDTH, command_console

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    console = command_console()  # pytest's stdout is not a terminal
    assert (console.is_terminal, console.soft_wrap, console.width) == (False, True, PIPE_WIDTH)
    monkeypatch.setenv("COLUMNS", "100")
    assert command_console(stderr=True).width == 100
    out = io.StringIO()
    console = command_console()
    console.file = out
    # no trailing space: the lowest rich the package allows drops one at a line's end
    line = ("[4/9] fizzbuzz / loop: passed (4 answers, 8 calls, 90.6 s) " * 4).rstrip()
    console.print(line, markup=False)
    assert out.getvalue() == line + "\n"  # longer than COLUMNS, and still one line


def test_the_eval_tables_in_a_pipe_keep_their_titles_and_rows_whole(tmp_path):
    import subprocess
    import sys

    from tests.conftest import ROOT, env_without_model_settings

    env = env_without_model_settings()
    env.pop("COLUMNS", None)
    proc = subprocess.run(
        [sys.executable, "-m", "loop_agents_cli", "eval", "--from",
         str(ROOT / "docs" / "images" / "eval-example.json")],
        capture_output=True, text=True, timeout=120, check=False, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert "Eval: K=3, T=1, max tokens 256, judge T=0, an illustrative model (example data)" in (
        lines
    )
    for title in ("Pass rate by attempt", "After the first answer", "Paired, task by task"):
        assert title in lines, title
    header = next(line for line in lines if line.lstrip().startswith("arm "))
    assert "calls" in header.split("passed", 1)[1]  # one table: not split for a narrow window
    assert any(line.startswith("T: the arm's sampling temperature") and line.endswith(
        "err: pairs without a result (failed every try).") for line in lines)  # fmt: skip
