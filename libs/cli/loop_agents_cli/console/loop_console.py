"""Watch a loop think: its agent's tokens, the evaluator's verdicts and a summary, in a terminal.

Each iteration starts with a status line; the agent's answer follows under
``----Agent----`` as it streams, the feedback under ``----Evaluator----``, and a table sums
the loop up. Colour and a spinner in a terminal, plain lines elsewhere (rich).

```python
result = await astream_to_console(loop, {"messages": [HumanMessage("Write a haiku.")]})
```
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from langchain_core.messages import AIMessageChunk
from langchain_core.runnables import RunnableConfig
from langgraph.pregel.protocol import PregelProtocol
from langgraph.types import StreamMode
from rich import box
from rich.console import Console, RenderableType
from rich.status import Status
from rich.table import Table
from rich.text import Text

from loop_agents.loop.events import (
    AgentFailed,
    AgentFinished,
    CandidatesJudged,
    EvaluationFinished,
    HistoryCompacted,
    IterationStarted,
    LoopEvent,
    LoopFinished,
    is_loop_event,
)
from loop_agents.loop.state import StopReason
from loop_agents.loop.tracing import candidate_of, iteration_of, role_of
from loop_agents_checks.sandbox.text_files import utf8_text
from loop_agents_cli.console.output import (
    command_console,
    format_cost,
    format_score,
    format_seconds,
    section_header,
)
from loop_agents_cli.console.tidy import TidyStream, shown_feedback, tidy, without_unclosed_fence

INTERRUPT = "__interrupt__"
"""The key under which a paused run's ``values`` (and ``ainvoke``'s output) list its interrupts."""

STREAM_MODES: list[StreamMode] = ["messages", "custom", "values"]
"""The stream modes `astream_to_console` asks for: tokens, loop events and the output."""


CACHED_KEYS = (
    "cached_input_tokens",
    "evaluator_cached_tokens",
    "history_cached_tokens",
    "advisor_cached_tokens",
)
"""The record keys of prompt tokens read from a server's prompt cache."""


@dataclass
class _Row:
    """What the console learned about one iteration."""

    iteration: int
    score: float | None = None
    agent_seconds: float = 0.0
    evaluation_seconds: float = 0.0
    tokens: int = 0
    cached: int = 0
    """Of the prompt tokens, those read from a server's prompt cache (every role's)."""
    cost: float | None = None
    stop: bool | None = None
    streamed: bool = False
    answered: bool = False
    """Whether the agent's answer came (the iteration counts as done, as in the state)."""


class _Waiting:
    """A status text that shows the time spent waiting, re-rendered by the spinner."""

    def __init__(self, label: str, clock: Callable[[], float]) -> None:
        self.label = label
        self.clock = clock
        self.since = clock()

    def __rich__(self) -> Text:
        return Text(f"{self.label} · {format_seconds(self.clock() - self.since)}", style="dim")


class LoopConsole:
    """Renders a loop's ``messages`` and ``custom`` streams on a ``rich`` console (`handle`).

    Args:
        console: Where to print; default `command_console` on stdout.
        clock: Seconds from a monotonic clock, for the status lines (tests inject one).
        agent_title: The title of the agent's sections.
        evaluator_title: The title of the evaluator's sections.
        tidy: Show a small model's text tidied (`loop_agents_cli.console.tidy`); what the
            loop keeps never changes. Without it only an unclosed code fence is dropped.

    Example:
        ```python
        view = LoopConsole()
        async for _ns, mode, payload in loop.astream(
            inputs, stream_mode=["messages", "custom"], subgraphs=True
        ):
            view.handle(mode, payload)
        ```
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        agent_title: str = "Agent",
        evaluator_title: str = "Evaluator",
        tidy: bool = False,
    ) -> None:
        self.console = console if console is not None else command_console()
        self.tidy = tidy
        self._stream = TidyStream() if tidy else None
        self.clock = clock
        self.agent_title = agent_title
        self.evaluator_title = evaluator_title
        self.finished: LoopFinished | None = None
        self._rows: dict[int, _Row] = {}
        self._max_iterations = 0
        self._started: float | None = None
        self._current: int | None = None
        self._line_open = False
        self._status: Status | None = None
        self._live = self.console.is_terminal and not self.console.is_dumb_terminal
        self._agent_header_due = False
        self._verdict_due: EvaluationFinished | None = None

    # -- input ---------------------------------------------------------------------------

    def handle(self, mode: str, payload: Any) -> None:
        """Render one stream item (``"messages"`` or ``"custom"``; other modes are ignored)."""
        if self._started is None:
            self._started = self.clock()
        if mode == "messages" and isinstance(payload, tuple) and len(payload) == 2:
            chunk, metadata = payload
            if isinstance(metadata, Mapping):
                self._token(chunk, metadata)
        elif mode == "custom" and is_loop_event(payload):
            self._event(payload)

    def paused(self) -> None:
        """Say that the run stopped at an interrupt (e.g. a human review) and waits."""
        self._idle()
        self._print(Text(""))
        self._print(
            Text(
                "paused: the run waits for input (an interrupt); resume it on the same "
                "thread with Command(resume=...)",
                style="bold yellow",
            )
        )

    def close(self) -> None:
        """Stop the spinner and end an open line; call it when the stream has ended."""
        self._idle()
        self._end_line()
        self._say_verdict(None)

    def failed(self, reason: str, *, iterations: int | None = None) -> None:
        """End the view of a loop that stopped before its end: the summary so far.

        ``reason`` takes the place of the stop reason; ``iterations`` the count of answered
        iterations when the console did not see them (a replay).

        Example:
            ```python
            view.failed("judge_invalid")
            ```
        """
        self._idle()
        self._end_line()
        rows = [self._rows[i] for i in sorted(self._rows)]
        scored = [row for row in rows if row.score is not None]
        best = max(reversed(scored), key=lambda row: row.score or 0.0) if scored else None
        last = max((row.iteration for row in rows if row.answered), default=0)
        if iterations is not None:
            last = iterations
        event: LoopFinished = {
            "type": "loop_finished",
            "loop": "",
            "stop_reason": cast(StopReason, reason),
            "iterations": last,
            "best_score": best.score if best is not None else None,
            "best_iteration": best.iteration if best is not None else None,
            "selected_iteration": best.iteration if best is not None else last,
            "answer": "",
        }
        self._loop_finished(event)

    def print_answer(self, answer: str) -> None:
        """Print ``answer`` under an ``----Answer----`` header (a run's answer, at its end).

        Example:
            ```python
            view.print_answer(result["answer"])
            ```
        """
        self._idle()
        self._end_line()
        self.console.print()
        self.console.print(section_header("Answer"), markup=False, highlight=False)
        self.console.print(self._answer(answer), markup=False, highlight=False, soft_wrap=True)

    def restore(self, rows: Sequence[Mapping[str, Any]], max_iterations: int) -> None:
        """Know iterations that ran before (a resumed run's records), without printing them.

        Example:
            ```python
            view.restore(saved_state["records"], max_iterations=3)
            ```
        """
        self._max_iterations = max_iterations
        for record in rows:
            row = self._row(int(record["iteration"]))
            row.answered = True
            row.score = record.get("score")
            row.stop = bool(record.get("stop"))
            row.agent_seconds = float(record.get("agent_seconds", 0.0))
            row.evaluation_seconds = float(record.get("evaluation_seconds", 0.0))
            row.cost = record.get("cost")
            row.tokens = sum(
                int(record.get(key, 0))
                for key in (
                    "input_tokens",
                    "output_tokens",
                    "evaluator_input_tokens",
                    "evaluator_output_tokens",
                )
            )
            row.cached = sum(int(record.get(key) or 0) for key in CACHED_KEYS)

    def show_saved_answer(
        self, iteration: int, answer: str, *, seconds: float = 0.0, tokens: int = 0
    ) -> None:
        """Show a saved answer that is judged next (a run resumed after its agent had answered).

        Call it after `restore`; ``seconds`` and ``tokens`` are the saved agent call's.

        Example:
            ```python
            view.show_saved_answer(2, state["last_response"].text, seconds=3.1, tokens=263)
            ```
        """
        if self._started is None:
            self._started = self.clock()
        self._idle()
        self._current = iteration
        row = self._row(iteration)
        row.answered = True
        row.agent_seconds = seconds
        row.tokens = tokens
        self._end_line()
        if iteration > 1:
            self._print(Text(""))
        self._print(
            Text(f"{self.status_line(iteration)} · resumed: the saved answer", style="bold")
        )
        self._agent_header_due = False
        self._header(self.agent_title, "cyan")
        self._print_answer_text(answer)
        self._busy(f"iteration {iteration} of {self._max_iterations} · evaluating")

    # -- events --------------------------------------------------------------------------

    def _event(self, event: LoopEvent) -> None:
        if event["type"] == "iteration_started":
            self._iteration_started(event)
        elif event["type"] == "agent_finished":
            self._agent_finished(event)
        elif event["type"] == "agent_failed":
            self._agent_failed(event)
        elif event["type"] == "candidates_judged":
            self._candidates_judged(event)
        elif event["type"] == "evaluation_finished":
            self._evaluation_finished(event)
        elif event["type"] == "history_compacted":
            self._history_compacted(event)
        else:
            self._loop_finished(event)

    def _iteration_started(self, event: IterationStarted) -> None:
        self._idle()
        self._say_verdict("another try")
        iteration = event["iteration"]
        if iteration == 1:  # a new loop (also a second run on the same thread)
            self._rows.clear()
            self.finished = None
        self._max_iterations = event["max_iterations"]
        self._current = iteration
        self._rows[iteration] = _Row(iteration)
        self._stream = TidyStream() if self.tidy else None
        self._end_line()
        if iteration > 1:
            self._print(Text(""))
        self._print(Text(self.status_line(iteration), style="bold"))
        self._agent_header_due = True  # printed with the answer: never an empty section
        self._busy(f"iteration {iteration} of {self._max_iterations} · the agent is thinking")

    def _agent_header(self) -> None:
        if self._agent_header_due:
            self._agent_header_due = False
            self._header(self.agent_title, "cyan")

    def _token(self, chunk: Any, metadata: Mapping[str, Any]) -> None:
        if role_of(metadata) != "agent" or not isinstance(chunk, AIMessageChunk):
            return
        if candidate_of(metadata) is not None:
            return  # k answers at once: each is printed whole when it is done
        text = chunk.text if self._stream is None else self._stream.feed(chunk.text)
        if not text:
            return
        iteration = iteration_of(metadata) or self._current
        row = self._rows.get(iteration) if iteration is not None else None
        if row is not None:
            row.streamed = True
        self._idle()
        self._agent_header()
        self.console.print(Text(utf8_text(text)), end="", soft_wrap=True)
        self._line_open = not text.endswith("\n")

    def _history_compacted(self, event: HistoryCompacted) -> None:
        self._idle()
        row = self._row(event["iteration"])
        row.tokens += event["input_tokens"] + event["output_tokens"]
        covered = event["summarized"]
        span = f"{covered[0]}-{covered[-1]}" if len(covered) > 1 else str(covered[0])
        self._end_line()
        self._print(
            Text(
                f"history compacted: attempts {span} summarized "
                f"({event['tokens_before']:,} -> {event['tokens_after']:,} tokens)",
                style="dim",
            )
        )
        self._busy(f"iteration {event['iteration']}: waiting for the agent")

    def _agent_finished(self, event: AgentFinished) -> None:
        self._idle()
        row = self._row(event["iteration"])
        row.answered = True
        row.agent_seconds = max(row.agent_seconds, event["seconds"])
        row.tokens += event["input_tokens"] + event["output_tokens"]
        if "candidate" in event:
            self._end_line()
            self._header(f"{self.agent_title} (candidate {event['candidate']})", "cyan")
            self._agent_header_due = False
        self._agent_header()
        if self._stream is not None:  # what a streamed line still held back
            held = self._stream.end()
            if held and row.streamed:
                self.console.print(Text(held), end="", soft_wrap=True)
                self._line_open = True
        if not row.streamed:
            self._print_answer_text(event["answer"])
        self._end_line()
        self._busy(f"iteration {event['iteration']} of {self._max_iterations} · evaluating")

    def _agent_failed(self, event: AgentFailed) -> None:
        self._idle()
        self._row(event["iteration"])
        which = f" (candidate {event['candidate']})" if "candidate" in event else ""
        self._end_line()
        self._header(f"{self.agent_title}{which}", "cyan")
        self._agent_header_due = False
        self._print(Text(f"failed: {event['error']}", style="red"))

    def _candidates_judged(self, event: CandidatesJudged) -> None:
        self._idle()
        shown = ", ".join(
            f"{c['candidate']}: "
            + ("failed" if c["error"] else format_score(c["score"]))
            + (" (accepted)" if c["stop"] else "")
            for c in event["candidates"]
        )
        self._print(Text(f"candidates {shown} · selected {event['selected']}", style="dim"))

    def _evaluation_finished(self, event: EvaluationFinished) -> None:
        self._idle()
        self._agent_header_due = False
        row = self._row(event["iteration"])
        row.cost = event.get("cost")
        row.score = event["score"]
        row.evaluation_seconds = event["seconds"]
        row.tokens += event["input_tokens"] + event["output_tokens"]
        row.stop = event["stop"]
        self._print(Text(""))
        self._header(self.evaluator_title, "magenta")
        if event["feedback"]:
            feedback = shown_feedback(event["feedback"]) if self.tidy else event["feedback"]
            self._print(Text(feedback))
        # the verdict line waits for what comes next: another iteration ("another try"),
        # or the end of the loop (then a rejected answer says "not accepted")
        self._verdict_due = event

    def _say_verdict(self, going_on: str | None) -> None:
        event, self._verdict_due = self._verdict_due, None
        if event is None:
            return
        verdict = "accepted" if event["stop"] else (going_on or "not accepted")
        score = "" if event["score"] is None else f"score {format_score(event['score'])} · "
        judges = ", ".join(event.get("decided_by") or [event["evaluator"]])
        self._print(Text(f"{score}{verdict} ({judges})", style="dim"))

    def _loop_finished(self, event: LoopFinished) -> None:
        self._idle()
        self._end_line()
        self._say_verdict(None)
        self.finished = event
        self._print(Text(""))
        self._header("Summary", "green")
        self._print(self.summary_table())
        self._print(Text(self.summary_line(), style="bold"))

    # -- what is printed -----------------------------------------------------------------

    def status_line(self, iteration: int) -> str:
        """``iteration 2 of 3 · 14.2s elapsed · scores: 72`` for the iteration starting."""
        elapsed = self.clock() - (self._started if self._started is not None else self.clock())
        scored = [r for r in self._rows.values() if r.iteration < iteration and r.stop is not None]
        scores = ", ".join(format_score(r.score) for r in scored) or "none yet"
        return (
            f"iteration {iteration} of {self._max_iterations} · "
            f"{format_seconds(elapsed)} elapsed · scores: {scores}"
        )

    def summary_table(self) -> Table:
        """One row per iteration: score, seconds and tokens (agent + evaluator), outcome."""
        finished = self.finished
        last = max(self._rows, default=0)
        table = Table(box=box.SIMPLE_HEAD if self._live else box.ASCII)
        table.add_column("iteration", justify="right")
        table.add_column("score", justify="right")
        table.add_column("seconds", justify="right")
        table.add_column("tokens", justify="right")
        cached = any(r.cached for r in self._rows.values())
        if cached:
            table.add_column("cached", justify="right")
        priced = any(r.cost is not None for r in self._rows.values())
        if priced:
            table.add_column("cost", justify="right")
        table.add_column("outcome")
        for iteration in sorted(self._rows):
            row = self._rows[iteration]
            outcome: str
            if iteration == last and finished is not None:
                outcome = finished["stop_reason"]
            else:
                outcome = "continued" if row.stop is False else "-"
            best = finished is not None and finished["best_iteration"] == iteration
            cells = [
                str(iteration),
                format_score(row.score) + (" *" if best else ""),
                f"{row.agent_seconds + row.evaluation_seconds:.1f}",
                str(row.tokens) if row.tokens else "-",  # none reported
            ]
            if cached:
                cells.append(str(row.cached) if row.tokens else "-")
            if priced:
                cells.append(format_cost(row.cost))
            table.add_row(*cells, outcome)
        return table

    def summary_line(self) -> str:
        """The closing line: why the loop stopped, after how many iterations, the best score.

        The time "in all" adds up the table's seconds, so a resumed run and its replay agree.
        """
        elapsed = self.clock() - (self._started if self._started is not None else self.clock())
        finished = self.finished
        if finished is None:
            return f"not finished · {format_seconds(elapsed)}"
        elapsed = sum(row.agent_seconds + row.evaluation_seconds for row in self._rows.values())
        best = (
            f"best score {format_score(finished['best_score'])} "
            f"(iteration {finished['best_iteration']})"
            if finished["best_score"] is not None
            else "no scores"
        )
        chosen = (
            f" · the answer is iteration {finished['selected_iteration']}'s"
            if finished["selected_iteration"] != finished["iterations"]
            else ""
        )
        costs = [r.cost for r in self._rows.values()]
        cost = (
            f" · cost {format_cost(sum(c for c in costs if c is not None))}"
            if costs and all(c is not None for c in costs)
            else ""
        )
        return (
            f"stopped: {finished['stop_reason']} after {finished['iterations']} of "
            f"{self._max_iterations} iterations · {best}{chosen}{cost} · "
            f"{format_seconds(elapsed)} in all"
        )

    # -- output helpers ------------------------------------------------------------------

    def _answer(self, answer: str) -> str:
        return (tidy if self.tidy else without_unclosed_fence)(utf8_text(answer))

    def _print_answer_text(self, answer: str) -> None:
        shown = self._answer(answer)
        if shown.strip():
            self._print(Text(shown))
        else:
            self._print(Text("(the answer has no text)", style="dim"))

    def _row(self, iteration: int) -> _Row:
        return self._rows.setdefault(iteration, _Row(iteration))

    def _header(self, title: str, style: str) -> None:
        self._print(Text(section_header(title), style=f"bold {style}"))

    def _print(self, renderable: RenderableType) -> None:
        self._end_line()
        self.console.print(renderable, soft_wrap=isinstance(renderable, Text))

    def _end_line(self) -> None:
        if self._line_open:
            self.console.print()
            self._line_open = False

    def _busy(self, label: str) -> None:
        if self._live:
            self._status = self.console.status(_Waiting(label, self.clock), spinner="dots")
            self._status.start()

    def _idle(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


class _Collector:
    """Routes the items of a multi-mode stream: values to the output, the rest to a view."""

    def __init__(self, graph: PregelProtocol[Any, Any, Any, Any], view: LoopConsole) -> None:
        self.view = view
        channels = getattr(graph, "output_channels", ())
        self.keys = {channels} if isinstance(channels, str) else set(channels)
        self.output: Any = None

    def take(self, item: Any) -> None:
        if len(item) == 3:
            namespace, mode, payload = item
        else:
            namespace, (mode, payload) = (), item
        if mode != "values":
            self.view.handle(mode, payload)
        elif not namespace:  # the graph's own state, not a subgraph's
            if isinstance(payload, dict):
                if INTERRUPT in payload:
                    self.view.paused()
                payload = {k: v for k, v in payload.items() if k in self.keys or k == INTERRUPT}
            self.output = payload


async def astream_to_console(
    graph: PregelProtocol[Any, Any, Any, Any],
    input: Any,
    config: RunnableConfig | None = None,
    *,
    view: LoopConsole | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``graph`` (a loop, or a graph with loops inside) and render it as it runs.

    It streams ``messages``, ``custom`` and ``values`` with ``subgraphs=True`` to ``view``
    (default a `LoopConsole`); ``kwargs`` go to ``graph.astream``. Returns the graph's output
    as ``ainvoke`` would (with ``"__interrupt__"`` when it paused), or ``None``.

    Example:
        ```python
        result = await astream_to_console(loop, {"messages": [HumanMessage("Hi")]})
        ```
    """
    collector = _Collector(graph, view if view is not None else LoopConsole())
    try:
        async for item in graph.astream(
            input, config, stream_mode=STREAM_MODES, subgraphs=True, **kwargs
        ):
            collector.take(item)
    finally:
        collector.view.close()
    return collector.output


def stream_to_console(
    graph: PregelProtocol[Any, Any, Any, Any],
    input: Any,
    config: RunnableConfig | None = None,
    *,
    view: LoopConsole | None = None,
    **kwargs: Any,
) -> Any:
    """Run ``graph`` synchronously and render it as it runs; see `astream_to_console`.

    Example:
        ```python
        result = stream_to_console(loop, {"messages": [HumanMessage("Hi")]})
        ```
    """
    collector = _Collector(graph, view if view is not None else LoopConsole())
    try:
        for item in graph.stream(input, config, stream_mode=STREAM_MODES, subgraphs=True, **kwargs):
            collector.take(item)
    finally:
        collector.view.close()
    return collector.output
