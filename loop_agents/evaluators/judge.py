"""`llm_judge`: a chat model scores the answer; below the threshold its comments go back.

The verdict (``feedback`` and a ``score`` on a fixed scale) is asked for through structured
output, or as plain text (`loop_agents.evaluators.text_verdict`). An unusable verdict is
asked for again, then raises `JudgeError`: a broken judge never passes an answer.
"""

from __future__ import annotations

import json
import string
import threading
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Literal, get_args

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.utils.function_calling import convert_to_json_schema
from pydantic import BaseModel

from loop_agents.evaluators import text_verdict
from loop_agents.evaluators.base import check_name, format_score, step, stepped_evaluator
from loop_agents.evaluators.verdict_schema import default_schema, schema_fields, with_scale
from loop_agents.loop.agents import encodable
from loop_agents.loop.evaluation import LoopEvaluatorRunnable
from loop_agents.loop.state import LoopContext, LoopEvaluation
from loop_agents.runtime.numbers import describe_number, finite_float
from loop_agents.runtime.steps import Program

StructuredOutput = Literal["native", "text"]
"""``"native"`` (the model's structured output, with a `JudgeMethod`) or ``"text"``."""

JudgeMethod = Literal["json_schema", "function_calling", "json_mode"]
"""How structured output is requested (``with_structured_output(method=...)``)."""

JudgeFormat = Literal["json_schema", "function_calling", "json_mode", "text"]
"""A `JudgeMethod`, or ``"text"`` for ``structured_output="text"``."""

METHODS: tuple[JudgeMethod, ...] = get_args(JudgeMethod)

REFUSALS = (
    "input should be 'text' or 'json_object'",
    "not supported by xgrammar",
    "does not support tools",
)
"""How servers refuse a structured-output method (matched in the error's text, lower case):
llama-cpp-python (HTTP 500) and vLLM before 0.5.5 (400) refuse ``json_schema``; vLLM's
xgrammar refuses a schema it cannot enforce, in a response format or tool (400); Ollama
refuses tools to a model whose template has none (400, ``<model> does not support tools``)."""

DEFAULT_TEMPLATE = "{feedback}\n\nScore: {score}"
"""The default feedback text: the judge's comments, then a score line."""

_BUILT_IN_FIELDS = frozenset({"feedback", "score", "threshold", "low", "high"})


def judge_format_options(judge_format: str) -> dict[str, Any]:
    """The `llm_judge` keywords of a `JudgeFormat`: ``method=``, or the text form.

    Example:
        ```python
        judge = llm_judge(model, rubric, threshold=75, **judge_format_options("json_mode"))
        ```
    """
    if judge_format not in get_args(JudgeFormat):
        formats = ", ".join(get_args(JudgeFormat))
        raise ValueError(f"a judge's format must be one of {formats}; got {judge_format!r}")
    return {"structured_output": "text"} if judge_format == "text" else {"method": judge_format}


class JudgeError(RuntimeError):
    """No usable verdict: ``problems`` says why, per attempt; ``iteration`` may be ``None``."""

    def __init__(
        self, message: str, problems: Sequence[str], *, iteration: int | None = None
    ) -> None:
        super().__init__(message)
        self.problems = list(problems)
        self.iteration = iteration


def refusal(error: BaseException) -> str | None:
    """The server's words when ``error`` (an HTTP error) refuses a structured-output method."""
    if not isinstance(getattr(error, "status_code", None), int):
        return None
    text = str(error)
    return text if any(words in text.lower() for words in REFUSALS) else None


class _Unusable(ValueError):
    """What is wrong with a verdict (it is asked for again, saying so)."""


class _Shown(float):
    """A number for templates: ``{score}`` shows 81 (not 81.0); ``{score:.1f}`` works."""

    def __format__(self, spec: str) -> str:
        return format_score(self) if not spec else float.__format__(self, spec)

    def __str__(self) -> str:
        return format_score(self)


class _Judge:
    """The judge's state and both call paths; `llm_judge` wraps it in a runnable."""

    def __init__(self, model: BaseChatModel, schema: dict[str, Any] | type, **options: Any) -> None:
        self.model, self.schema = model, schema
        self.instructions: SystemMessage = options["instructions"]
        self.threshold: float = options["threshold"]
        self.low, self.high = options["scale"]
        self.template: str = options["template"]
        self.whole_conversation: bool = options["whole_conversation"]
        self.retries: int = options["retries"]
        self.score_key: str = options["score_key"]
        self.feedback_key: str = options["feedback_key"]
        self.name: str = options["name"]
        self.text_form: bool = options["text_form"]
        self.method: JudgeMethod = options["method"]
        self.configured = self.method
        # a method the server refused is not asked again (its words, by method)
        self.refused: dict[str, str] = {}
        self.runnables: dict[str, Runnable[Any, Any]] = {}
        self.warned = False
        self.lock = threading.Lock()
        self.runnable(self.method)  # a model without structured output fails here

    def runnable(self, method: JudgeMethod) -> Runnable[Any, Any]:
        if self.text_form:
            return self.model
        if method not in self.runnables:
            self.runnables[method] = self.model.with_structured_output(
                self.schema, method=method, include_raw=True
            )
        return self.runnables[method]

    def verdict(self, context: LoopContext, config: RunnableConfig) -> Program[LoopEvaluation]:
        """Ask until a verdict is usable (`JudgeError` after ``retries``), off refused methods."""
        problems: list[str] = []
        while True:
            method = self.method
            try:
                messages = self.prompt(context, problems, method)
                judge = self.runnable(method)
                out = (yield step("llm_judge", judge.invoke, judge.ainvoke, messages, config)).value
            except Exception as error:
                if not self.switch(method, error, context):
                    raise
                continue
            self.warn_once(method)
            try:
                return self.evaluation(self.read(out, context))
            except (_Unusable, text_verdict.TextVerdictError) as problem:
                problems.append(str(problem))
            if len(problems) > self.retries:
                raise self.error(context, problems)

    def switch(self, method: JudgeMethod, error: Exception, context: LoopContext) -> bool:
        """Move off ``method`` if ``error`` refuses it (`JudgeError` when none is left)."""
        words = None if self.text_form else refusal(error)
        if words is None:
            return False
        with self.lock:
            self.refused.setdefault(method, words)
            if self.method != method:  # another call switched already
                return True
            left = [m for m in (self.configured, *METHODS) if m not in self.refused]
            if not left:
                said = "; ".join(f"{m}: {w:.300}" for m, w in self.refused.items())
                raise JudgeError(
                    f"llm_judge {self.name!r}: the server refused every structured-output "
                    f"method ({said}). Use llm_judge(..., structured_output='text') (a "
                    f"'Score: N' / 'Feedback: ...' reply), or a model or server that takes "
                    f"method='json_schema', 'function_calling' or 'json_mode'.",
                    list(self.refused.values()),
                    iteration=context["iteration"],
                ) from error
            self.method = left[0]
        return True

    def warn_once(self, method: JudgeMethod) -> None:
        with self.lock:
            if self.warned or method == self.configured:
                return
            self.warned = True
        said = "; ".join(f"{m} ({w:.300})" for m, w in self.refused.items())
        warnings.warn(
            f"llm_judge {self.name!r}: the server refused {said}; the judge now uses "
            f'method="{method}". Set llm_judge(..., method="{method}") to skip the refused '
            f"requests.",
            UserWarning,
            stacklevel=2,
        )

    def prompt(
        self, context: LoopContext, problems: Sequence[str], method: JudgeMethod
    ) -> list[AnyMessage]:
        """Instructions, then the request and the answer (or the whole conversation)."""
        request = [*context["init_messages"], context["last_response"]]
        shown = list(context["messages"]) if self.whole_conversation else request
        if self.text_form:
            scale = (self.low, self.high)
            return encodable(text_verdict.text_prompt(self.instructions, shown, problems, scale))
        messages: list[AnyMessage] = [self.instructions, *shown]
        if method == "json_mode":  # no schema is sent with the request: say it here
            try:
                schema = convert_to_json_schema(self.schema)
            except ValueError:
                schema = dict(self.schema) if isinstance(self.schema, Mapping) else {}
            ask = f"Reply with only a JSON object of this JSON schema:\n{json.dumps(schema)}"
            messages.append(HumanMessage(ask))
        if problems:
            messages.append(
                HumanMessage(
                    f"Your verdict could not be used: {problems[-1]}. Judge the answer "
                    f"again and reply with '{self.feedback_key}' (text) and "
                    f"'{self.score_key}' (a number from {format_score(self.low)} to "
                    f"{format_score(self.high)})."
                )
            )
        return encodable(messages)

    def read(self, out: Any, context: LoopContext) -> dict[str, Any]:
        """The verdict, its score a float on the scale; raises `_Unusable` saying why not."""
        if self.text_form:  # a line that repeats one of the judged answer's is not read
            shown = context["messages"] if self.whole_conversation else [context["last_response"]]
            judged = [m.text for m in shown if isinstance(m, AIMessage)]
            text = out.text if isinstance(out, BaseMessage) else out
            if not isinstance(text, str):
                raise _Unusable(f"the reply is {type(out).__name__} {out!r:.60}, not a text")
            score, feedback = text_verdict.parse_text_verdict(
                text, (self.low, self.high), judged=judged
            )
            return self.checked({self.feedback_key: feedback, self.score_key: score})
        raw, parsed, error = out["raw"], out["parsed"], out["parsing_error"]
        if error is not None:
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise _Unusable(f"the reply did not parse ({first_line}); it was {_excerpt(raw)}")
        if parsed is None:
            raise _Unusable(f"the reply held no verdict; it was {_excerpt(raw)}")
        parsed = parsed.model_dump() if isinstance(parsed, BaseModel) else parsed
        if not isinstance(parsed, Mapping):
            raise _Unusable(f"the verdict is {type(parsed).__name__} {parsed!r:.60}, not an object")
        return self.checked({str(k): v for k, v in parsed.items()})

    def checked(self, verdict: dict[str, Any]) -> dict[str, Any]:
        """``verdict`` with its score a float; raises `_Unusable` saying what is wrong."""
        key = self.score_key
        if key not in verdict:
            raise _Unusable(f"the verdict has no '{key}' (fields: {sorted(verdict)})")
        score = verdict[key]
        if isinstance(score, str):
            try:
                score = float(score.strip())
            except ValueError:
                raise _Unusable(f"'{key}' is {score!r}, not a number") from None
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise _Unusable(f"'{key}' is {score!r:.60} ({type(score).__name__}), not a number")
        number = finite_float(score)
        if number is None:
            raise _Unusable(f"'{key}' is {describe_number(score)}, not a finite number")
        if not self.low <= score <= self.high:
            # the exact value: 100.0000001 must not read as "100"
            low, high = format_score(self.low), format_score(self.high)
            raise _Unusable(
                f"the {key} {describe_number(score)} is outside the scale {low}-{high} (out of "
                f"range: it must be from {low} to {high})"
            )
        if not isinstance(verdict.get(self.feedback_key), str):
            raise _Unusable(
                f"'{self.feedback_key}' is {verdict.get(self.feedback_key)!r:.40}, not a text"
            )
        return {**verdict, key: number}

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
        feedback = self.template.format_map(values).strip()
        return {"stop": score >= self.threshold, "feedback": feedback, "score": score}

    def error(self, context: LoopContext, problems: Sequence[str]) -> JudgeError:
        attempts = "; ".join(f"attempt {i}: {p}" for i, p in enumerate(problems, 1))
        hint = (
            "check the model can follow the text form ('Score: N', 'Feedback: ...')"
            if self.text_form
            else "check `method` suits the server (llama.cpp needs 'function_calling')"
        )
        return JudgeError(
            f"llm_judge {self.name!r} gave no usable verdict at iteration "
            f"{context['iteration']} after {len(problems)} attempts ({attempts}). Expected "
            f"'{self.feedback_key}' and '{self.score_key}' from {format_score(self.low)} to "
            f"{format_score(self.high)}; make the scale clear in the instructions, {hint}, "
            f"or raise `retries`.",
            problems,
            iteration=context["iteration"],
        )


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
    pair = scale if isinstance(scale, tuple | list) and len(scale) == 2 else None
    if pair is None or any(isinstance(v, bool) or not isinstance(v, int | float) for v in pair):
        raise TypeError(f"scale must be two numbers (low, high), e.g. (0, 100); got {scale!r}")
    low, high = finite_float(pair[0]), finite_float(pair[1])
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


def _check_model(model: object, text_form: bool, schema: object, keys: tuple[str, str]) -> None:
    needed = ("invoke", "ainvoke") if text_form else ("with_structured_output",)
    if not all(callable(getattr(model, method, None)) for method in needed):
        raise TypeError(
            f"model must be a chat model with {' and '.join(needed)} (e.g. ChatOpenAI); got "
            f"{type(model).__name__}"
        )
    if text_form and (schema is not None or keys != ("score", "feedback")):
        raise ValueError(
            "structured_output='text' reads a fixed form ('Score: N', 'Feedback: ...'): it "
            "takes no schema and has the fields 'score' and 'feedback' only (use {score} and "
            "{feedback} in the template); drop schema=, score_key= and feedback_key=, or use "
            "structured_output='native'"
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

    The judge is sent ``instructions`` (system), then the request and the latest answer
    (or, with ``whole_conversation=True``, every message). The answer is accepted when the
    score reaches ``threshold``; the feedback is ``template`` filled with the verdict. A
    verdict that does not parse, lacks a field or is off ``scale`` is asked for again
    (saying what was wrong) up to ``retries`` times, then `JudgeError` is raised.

    When the server refuses ``method`` (`REFUSALS`: llama.cpp's, vLLM's and Ollama's
    words), the judge moves to the next of ``json_schema``, ``function_calling``,
    ``json_mode`` for the rest of its life, warning once with the method it now uses;
    when the server refuses them all, `JudgeError` names what to set.

    Args:
        model: The judge, a chat model.
        instructions: The judge's system prompt: the rubric (also the ``criteria``).
        threshold: The score at or above which the answer is accepted.
        scale: The ``(low, high)`` range scores must fall in.
        schema: A TypedDict, pydantic class or JSON schema with ``score_key`` and
            ``feedback_key`` (its other fields may be used in ``template``).
        method: ``"json_schema"``, ``"function_calling"`` or ``"json_mode"``.
        template: A ``str.format`` template of the verdict's fields and ``{feedback}``,
            ``{score}``, ``{threshold}``, ``{low}``, ``{high}``.
        whole_conversation: Show the judge the whole conversation.
        retries: How many times an unusable verdict is asked for again (>= 0).
        score_key: The schema field holding the score.
        feedback_key: The schema field holding the comments.
        name: The evaluator's name in records, traces and combinators.
        structured_output: ``"native"``, or ``"text"``: ``Score: N`` and ``Feedback: ...``
            as plain text, from any chat model (no schema or keys).

    Example:
        ```python
        judge = llm_judge(ChatOpenAI(model="gpt-5.4-mini"), "Score the haiku 0-100.", threshold=75)
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
    _check_model(model, text_form, schema, (score_key, feedback_key))
    if isinstance(instructions, str):
        instructions = SystemMessage(content=instructions)
    elif not isinstance(instructions, SystemMessage):
        raise TypeError(
            f"instructions must be a string or a SystemMessage; got {type(instructions).__name__}"
        )
    low, high, threshold = _check_scale(scale, threshold)
    if method not in METHODS:
        raise ValueError(
            f"method must be 'json_schema', 'function_calling' or 'json_mode'; got {method!r}"
        )
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise ValueError(f"retries must be an int >= 0; got {retries!r}")
    given = dict(schema) if isinstance(schema, Mapping) else schema
    chosen = default_schema((low, high)) if given is None else given
    fields = schema_fields(chosen)
    missing = [key for key in (score_key, feedback_key) if key not in fields]
    if missing:
        raise ValueError(
            f"the verdict schema has no field {missing[0]!r} (fields: {sorted(fields)}); add "
            f"it or pass score_key=/feedback_key= naming the schema's fields"
        )
    judge = _Judge(
        model,
        with_scale(chosen, score_key, (low, high)),
        instructions=instructions,
        threshold=threshold,
        scale=(low, high),
        method=method,
        template=_check_template(template, fields),
        whole_conversation=bool(whole_conversation),
        retries=retries,
        score_key=score_key,
        feedback_key=feedback_key,
        name=check_name(name, "llm_judge"),
        text_form=text_form,
    )
    criteria = instructions.text.strip() or None
    return stepped_evaluator(judge.name, judge.verdict, criteria=criteria)
