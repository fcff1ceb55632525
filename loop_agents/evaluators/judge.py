"""`llm_judge`: a chat model scores the answer; below the threshold its comments go back.

The seed's reviewer as one call: the judge model is asked, through structured output,
for a verdict with a ``feedback`` text and a ``score`` on a fixed scale. A verdict that
does not parse, lacks a field or scores outside the scale is asked for again (telling
the model what was wrong) a bounded number of times, then raises `JudgeError`: a broken
judge never passes an answer. With ``structured_output="text"`` the verdict is asked for
as plain text instead (``Score: N`` and ``Feedback: ...``, see
`loop_agents.evaluators.text_verdict`), for models without tool calling.
"""

from __future__ import annotations

import string
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from pydantic import BaseModel

from loop_agents.evaluators import text_verdict
from loop_agents.evaluators.base import (
    check_name,
    format_score,
    make_evaluator,
)
from loop_agents.evaluators.verdict_schema import default_schema, schema_fields, with_scale
from loop_agents.loop.agents import encodable
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float

StructuredOutput = Literal["native", "text"]
"""How the verdict is asked for: ``"native"`` (the model's structured output, with
`JudgeMethod`) or ``"text"`` (a fixed text form, for models without tool calling)."""

JudgeMethod = Literal["json_schema", "function_calling", "json_mode"]
"""How structured output is requested: ``json_schema`` (OpenAI), ``function_calling``
(servers that only do tool calls, such as llama.cpp's) or ``json_mode``."""

JudgeFormat = Literal["json_schema", "function_calling", "json_mode", "text"]
"""How a judge made from settings asks for its verdict: a `JudgeMethod` of structured
output, or ``"text"`` (``structured_output="text"``: ``Score: N`` and ``Feedback: ...``)."""


def judge_format_options(judge_format: str) -> dict[str, Any]:
    """The `llm_judge` keywords for a `JudgeFormat` (``method=``, or the text form).

    Example:
        ```python
        judge_format_options("text")  # {'structured_output': 'text'}
        judge_format_options("function_calling")  # {'method': 'function_calling'}
        judge = llm_judge(model, rubric, threshold=80, **judge_format_options(fmt))
        ```

    """
    if judge_format == "text":
        return {"structured_output": "text"}
    if judge_format not in get_args(JudgeMethod):
        raise ValueError(
            f"a judge's format must be one of {', '.join(get_args(JudgeFormat))}; got "
            f"{judge_format!r}"
        )
    return {"method": judge_format}


DEFAULT_TEMPLATE = "{feedback}\n\nScore: {score}"
"""The default feedback text: the judge's comments, then a score line."""

_BUILT_IN_FIELDS = frozenset({"feedback", "score", "threshold", "low", "high"})


class JudgeError(RuntimeError):
    """An LLM judge gave no usable verdict within its retries.

    Attributes:
        problems: What was wrong with each attempt, in order.
        iteration: The loop's iteration whose answer was being judged (``None`` when
            not known).

    """

    def __init__(
        self, message: str, problems: Sequence[str], *, iteration: int | None = None
    ) -> None:
        super().__init__(message)
        self.problems = list(problems)
        self.iteration = iteration


class _Shown(float):
    """A number for templates: ``{score}`` shows 81 (not 81.0); ``{score:.1f}`` works."""

    def __format__(self, spec: str) -> str:
        return format_score(self) if not spec else float.__format__(self, spec)

    def __str__(self) -> str:
        return format_score(self)


class _Judge:
    """The judge's state and both call paths; `llm_judge` wraps it in a runnable."""

    def __init__(
        self,
        model: BaseChatModel,
        instructions: SystemMessage,
        *,
        threshold: float,
        scale: tuple[float, float],
        schema: dict[str, Any] | type,
        method: JudgeMethod,
        template: str,
        whole_conversation: bool,
        retries: int,
        score_key: str,
        feedback_key: str,
        name: str,
        text_form: bool = False,
    ) -> None:
        self.text_form = text_form
        self.structured: Runnable[Any, Any] = (
            model
            if text_form
            else model.with_structured_output(schema, method=method, include_raw=True)
        )
        self.instructions = instructions
        self.threshold = threshold
        self.low, self.high = scale
        self.template = template
        self.whole_conversation = whole_conversation
        self.retries = retries
        self.score_key = score_key
        self.feedback_key = feedback_key
        self.name = name

    # -- calls ---------------------------------------------------------------------

    def invoke(self, context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        problems: list[str] = []
        for _ in range(self.retries + 1):
            out = self.structured.invoke(encodable(self.prompt(context, problems)), config)
            verdict = self.read(out, problems, context)
            if verdict is not None:
                return self.evaluation(verdict)
        raise self.error(context, problems)

    async def ainvoke(self, context: LoopContext, config: RunnableConfig) -> LoopEvaluation:
        problems: list[str] = []
        for _ in range(self.retries + 1):
            out = await self.structured.ainvoke(encodable(self.prompt(context, problems)), config)
            verdict = self.read(out, problems, context)
            if verdict is not None:
                return self.evaluation(verdict)
        raise self.error(context, problems)

    # -- the prompt ----------------------------------------------------------------

    def prompt(self, context: LoopContext, problems: Sequence[str]) -> list[AnyMessage]:
        """Instructions, then the request and the answer (or the whole conversation)."""
        if self.whole_conversation:
            shown = list(context["messages"])
        else:
            shown = [*context["init_messages"], context["last_response"]]
        if self.text_form:
            return text_verdict.text_prompt(
                self.instructions, shown, problems, (self.low, self.high)
            )
        messages: list[AnyMessage] = [self.instructions, *shown]
        if problems:
            messages.append(
                HumanMessage(
                    content=(
                        f"Your verdict could not be used: {problems[-1]}. Judge the answer "
                        f"again and reply with '{self.feedback_key}' (text) and "
                        f"'{self.score_key}' (a number from {format_score(self.low)} to "
                        f"{format_score(self.high)})."
                    )
                )
            )
        return messages

    # -- reading the verdict -------------------------------------------------------

    def answers_shown(self, context: LoopContext | None) -> list[str]:
        """The texts of the answers the judge is shown (where an injected verdict would be)."""
        if context is None:
            return []
        if self.whole_conversation:
            shown: list[Any] = list(context.get("messages") or [])
        else:
            shown = [context.get("last_response")]
        return [m.text for m in shown if isinstance(m, AIMessage)]

    def read(
        self, out: Any, problems: list[str], context: LoopContext | None = None
    ) -> dict[str, Any] | None:
        """The verdict as a dict with a float score, or ``None`` (problem recorded)."""
        if self.text_form:
            return self.read_text(out, problems, self.answers_shown(context))
        raw = out.get("raw") if isinstance(out, Mapping) else None
        parsed = out.get("parsed") if isinstance(out, Mapping) else out
        error = out.get("parsing_error") if isinstance(out, Mapping) else None
        problem: str | None = None
        if error is not None:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            problem = f"the reply did not parse ({first_line}); it was {_excerpt(raw)}"
        elif parsed is None:
            problem = f"the reply held no verdict; it was {_excerpt(raw)}"
        else:
            if isinstance(parsed, BaseModel):
                parsed = parsed.model_dump()
            if not isinstance(parsed, Mapping):
                problem = f"the verdict is {type(parsed).__name__} {parsed!r:.60}, not an object"
            else:
                verdict = {str(k): v for k, v in parsed.items()}
                problem = self.check(verdict)
                if problem is None:
                    return verdict
        problems.append(problem)
        return None

    def read_text(
        self, out: Any, problems: list[str], judged: Sequence[str] = ()
    ) -> dict[str, Any] | None:
        """The text form's verdict (`text_verdict.parse_text_verdict`), or ``None``.

        ``judged`` are the texts of the answers shown: a reply's line that repeats one of
        their ``Score:``/``Feedback:`` lines is an echo of the answer, not the verdict.
        """
        try:
            text = text_verdict.reply_text(out)
            score, feedback = text_verdict.parse_text_verdict(
                text, (self.low, self.high), judged=judged
            )
        except text_verdict.TextVerdictError as exc:
            problems.append(str(exc))
            return None
        verdict: dict[str, Any] = {self.feedback_key: feedback, self.score_key: score}
        problem = self.check(verdict)
        if problem is not None:
            problems.append(problem)
            return None
        return verdict

    def check(self, verdict: dict[str, Any]) -> str | None:
        """Validate ``verdict`` in place (the score becomes a float); say what is wrong."""
        if self.score_key not in verdict:
            return f"the verdict has no '{self.score_key}' (fields: {sorted(verdict)})"
        score = verdict[self.score_key]
        if isinstance(score, str):
            try:
                score = float(score.strip())
            except ValueError:
                return f"'{self.score_key}' is {score!r}, not a number"
        if isinstance(score, bool) or not isinstance(score, int | float):
            return f"'{self.score_key}' is {score!r:.60} ({type(score).__name__}), not a number"
        number = finite_float(score)
        if number is None:
            return f"'{self.score_key}' is {describe_number(score)}, not a finite number"
        if not self.low <= score <= self.high:
            # the exact value: 100.0000001 must not read as "100"
            low, high = format_score(self.low), format_score(self.high)
            return (
                f"the {self.score_key} {describe_number(score)} is outside the scale "
                f"{low}-{high} (out of range: it must be from {low} to {high})"
            )
        feedback = verdict.get(self.feedback_key)
        if not isinstance(feedback, str):
            return f"'{self.feedback_key}' is {feedback!r:.40}, not a text"
        verdict[self.score_key] = number
        return None

    def evaluation(self, verdict: dict[str, Any]) -> LoopEvaluation:
        score = float(verdict[self.score_key])
        values = {
            **verdict,
            "feedback": str(verdict[self.feedback_key]).strip(),
            "score": _Shown(score),
            "threshold": _Shown(self.threshold),
            "low": _Shown(self.low),
            "high": _Shown(self.high),
        }
        return {
            "stop": score >= self.threshold,
            "feedback": self.template.format_map(values).strip(),
            "score": score,
        }

    def error(self, context: LoopContext, problems: Sequence[str]) -> JudgeError:
        attempts = "; ".join(f"attempt {i}: {p}" for i, p in enumerate(problems, 1))
        return JudgeError(
            f"llm_judge {self.name!r} gave no usable verdict at iteration "
            f"{context['iteration']} after {len(problems)} attempts ({attempts}). Expected "
            f"'{self.feedback_key}' and '{self.score_key}' from {format_score(self.low)} to "
            f"{format_score(self.high)}; make the scale clear in the instructions, "
            f"{self.hint()}, or raise `retries`.",
            problems,
            iteration=context["iteration"],
        )

    def hint(self) -> str:
        if self.text_form:
            return "check the model can follow the text form ('Score: N', 'Feedback: ...')"
        return "check `method` suits the server (llama.cpp needs 'function_calling')"


def _excerpt(raw: object) -> str:
    if isinstance(raw, AIMessage):
        if raw.tool_calls:
            return f"a call of {raw.tool_calls[0]['name']} with {raw.tool_calls[0]['args']!r:.160}"
        if raw.invalid_tool_calls:
            call = raw.invalid_tool_calls[0]
            return f"a malformed call of {call.get('name')} with {call.get('args')!r:.160}"
        return repr(raw.text[:160]) if raw.text else "empty"
    return f"{raw!r:.160}"


def _check_scale(scale: object, threshold: object) -> tuple[float, float, float]:
    if (
        not isinstance(scale, tuple | list)
        or len(scale) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in scale)
    ):
        raise TypeError(
            f"scale must be a (low, high) pair of numbers, e.g. (0, 100); got {scale!r}"
        )
    low, high = finite_float(scale[0]), finite_float(scale[1])
    if low is None or high is None or not low < high:
        raise ValueError(f"scale must have low < high, both finite; got {scale!r:.80}")
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise TypeError(f"threshold must be a number on the scale {scale!r}; got {threshold!r}")
    if finite_float(threshold) is None or not low <= threshold <= high:
        raise ValueError(
            f"threshold {describe_number(threshold)} is outside the scale {format_score(low)}-"
            f"{format_score(high)}; pass a threshold on the scale or change `scale`"
        )
    return low, high, float(threshold)


def _check_text_form(model: object, schema: object, score_key: str, feedback_key: str) -> None:
    if not (callable(getattr(model, "invoke", None)) and callable(getattr(model, "ainvoke", None))):
        raise TypeError(
            f"model must be a chat model (with invoke and ainvoke); got {type(model).__name__}"
        )
    if schema is not None:
        raise ValueError(
            "structured_output='text' reads a fixed form ('Score: N', 'Feedback: ...') and "
            "takes no schema; drop schema= or use structured_output='native'"
        )
    if (score_key, feedback_key) != ("score", "feedback"):
        raise ValueError(
            "structured_output='text' has the fields 'score' and 'feedback' only; drop "
            "score_key=/feedback_key= (use {score} and {feedback} in the template)"
        )


def _check_template(template: object, fields: set[str]) -> str:
    if not isinstance(template, str):
        raise TypeError(f"template must be a format string; got {template!r:.60}")
    allowed = fields | _BUILT_IN_FIELDS
    try:
        used = {
            field.split(".")[0].split("[")[0]
            for _, field, _, _ in string.Formatter().parse(template)
            if field is not None
        }
    except ValueError as exc:
        raise ValueError(f"template {template!r:.60} is not a valid format string: {exc}") from exc
    unknown = sorted(used - allowed)
    if unknown or "" in used:
        raise ValueError(
            f"template {template!r:.60} uses {unknown or ['{}']}; it may use the named fields "
            f"{sorted(allowed)}"
        )
    return template


def llm_judge(
    model: BaseChatModel,
    instructions: str | SystemMessage,
    *,
    threshold: float,
    scale: tuple[float, float] = (0, 100),
    schema: type | Mapping[str, Any] | None = None,
    method: JudgeMethod = "json_schema",
    template: str = DEFAULT_TEMPLATE,
    whole_conversation: bool = False,
    retries: int = 2,
    score_key: str = "score",
    feedback_key: str = "feedback",
    name: str = "llm_judge",
    structured_output: StructuredOutput = "native",
) -> LoopEvaluatorRunnable:
    r"""An evaluator that asks a chat model for a score and feedback on each answer.

    The judge is sent ``instructions`` as a system message, then the original request
    and the latest answer (as in the seed), or with ``whole_conversation=True`` the whole
    conversation. Its reply is read through structured output into ``schema``; the
    answer is accepted when the score reaches ``threshold``. The feedback sent back to
    the agent is ``template`` filled in with the verdict.

    A reply that does not parse, lacks a field or scores outside ``scale`` is asked for
    again (the model is told what was wrong) up to ``retries`` times; then `JudgeError`
    is raised. The evaluator works with both ``invoke`` and ``ainvoke`` of the loop.

    With ``structured_output="text"`` no structured output is used: the judge is asked
    to reply ``Score: N`` and ``Feedback: ...`` (the form is appended to the
    instructions and repeated after the answer), and the reply is parsed strictly (see
    `loop_agents.evaluators.text_verdict` for exactly what is accepted), with the same
    re-asking and `JudgeError`. Any chat model works, also one without tool calling or
    JSON output (Ollama's small models, SmolLM2 on llama.cpp).

    Args:
        model: The judge, a chat model with ``with_structured_output`` (e.g.
            ``ChatOpenAI``).
        instructions: The judge's system prompt: the rubric.
        threshold: The score at or above which the answer is accepted.
        scale: The ``(low, high)`` range scores must fall in (default 0-100).
        schema: The verdict's schema: a TypedDict or pydantic class or a JSON-schema
            dict with ``score_key`` and ``feedback_key`` fields (more fields may be
            used in ``template``). Default: ``feedback`` and ``score``, described with
            the scale.
        method: How structured output is requested: ``"json_schema"`` (OpenAI's
            default), ``"function_calling"`` (llama.cpp's server and others that only
            do tool calls) or ``"json_mode"``.
        template: The feedback text, a ``str.format`` template with the verdict's
            fields and ``{feedback}``, ``{score}``, ``{threshold}``, ``{low}``, ``{high}``.
            Default ``"{feedback}\n\nScore: {score}"``; the seed's Chinese form is
            ``"{feedback}\n\n综合得分：{score}"``.
        whole_conversation: Show the judge every message of the conversation (earlier
            attempts and feedback included) instead of the request and latest answer.
        retries: How many times an unusable verdict is asked for again (>= 0).
        score_key: The schema field holding the score.
        feedback_key: The schema field holding the comments.
        name: The evaluator's name in records, traces and combinators.
        structured_output: ``"native"`` (the default): the model's structured output,
            requested with ``method``. ``"text"``: the fixed text form; ``schema``,
            ``score_key`` and ``feedback_key`` do not apply and ``method`` is not used.

    Returns:
        A runnable evaluator for `create_loop_agent`, ``all_of`` or ``panel``. Its
        ``criteria`` attribute is the text of ``instructions`` (shown to the agent
        with ``create_loop_agent(..., controls=[Criteria()])``).

    Raises:
        TypeError: ``model`` has no ``with_structured_output`` (``invoke`` for the
            text form) or an option has the wrong type.
        ValueError: the threshold is off the scale, the schema lacks the score or
            feedback field, the template names unknown fields, ``structured_output``
            is unknown, or the text form is given a schema or field names.

    Example:
        ```python
        from langchain_openai import ChatOpenAI
        from loop_agents import create_loop_agent, llm_judge

        judge = llm_judge(
            ChatOpenAI(model="gpt-5.4-mini"),
            "Score the haiku from 0 to 100: form, imagery, surprise.",
            threshold=75,
        )
        loop = create_loop_agent(poet, judge, max_iterations=3)
        ```

    """
    if structured_output not in ("native", "text"):
        raise ValueError(
            f"structured_output must be 'native' (the model's structured output) or 'text' "
            f"(a 'Score: N' / 'Feedback: ...' reply, for models without tool calling); got "
            f"{structured_output!r}"
        )
    text_form = structured_output == "text"
    if text_form:
        _check_text_form(model, schema, score_key, feedback_key)
    elif not callable(getattr(model, "with_structured_output", None)):
        raise TypeError(
            f"model must be a chat model with with_structured_output (e.g. ChatOpenAI); got "
            f"{type(model).__name__}"
        )
    if isinstance(instructions, str):
        instructions = SystemMessage(content=instructions)
    elif not isinstance(instructions, SystemMessage):
        raise TypeError(
            f"instructions must be a string or a SystemMessage; got {type(instructions).__name__}"
        )
    low, high, threshold = _check_scale(scale, threshold)
    if method not in ("json_schema", "function_calling", "json_mode"):
        raise ValueError(
            f"method must be 'json_schema', 'function_calling' or 'json_mode'; got {method!r}"
        )
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an int >= 0; got {retries!r}")
    chosen_schema: dict[str, Any] | type
    if schema is None:
        chosen_schema = default_schema((low, high))
    elif isinstance(schema, Mapping):
        chosen_schema = dict(schema)
    else:
        chosen_schema = schema
    fields = schema_fields(chosen_schema)
    chosen_schema = with_scale(chosen_schema, score_key, (low, high))
    missing = [key for key in (score_key, feedback_key) if key not in fields]
    if missing:
        raise ValueError(
            f"the verdict schema has no field {missing[0]!r} (fields: {sorted(fields)}); add "
            f"it or pass score_key=/feedback_key= naming the schema's fields"
        )
    judge = _Judge(
        model,
        instructions,
        threshold=threshold,
        scale=(low, high),
        schema=chosen_schema,
        method=method,
        template=_check_template(template, fields),
        whole_conversation=bool(whole_conversation),
        retries=retries,
        score_key=score_key,
        feedback_key=feedback_key,
        name=check_name(name, "llm_judge"),
        text_form=text_form,
    )
    return make_evaluator(
        judge.name, judge.invoke, judge.ainvoke, criteria=instructions.text.strip() or None
    )
