"""``loop-agents run`` and ``loop-agents resume``: put a task through a loop, or go on with one.

Both print which model they use and the run's id, stream the loop to the console (or print
one JSON object with ``--json``), and exit 0 when the loop ran, 1 when it failed, 130 on
Ctrl-C (with the command that resumes the run).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path

from loop_agents_cli.console.loop_console import LoopConsole
from loop_agents_cli.errors import InputError, UsageError
from loop_agents_cli.interrupt import CtrlC, run_interruptible
from loop_agents_cli.loop import DEFAULT_SYSTEM
from loop_agents_cli.models.endpoints import Endpoint, endpoint_from_spec
from loop_agents_cli.models.local_model import LocalModelError
from loop_agents_cli.models.settings import Environment, SettingsError, StructuredOutputMethod
from loop_agents_cli.parser import PROG
from loop_agents_cli.prompt_size import check_prompt_size
from loop_agents_cli.results import result_json
from loop_agents_cli.session import Outcome, Progress, run_session
from loop_agents_cli.spec import RunSpec
from loop_agents_cli.store import RunStore, SavedRun, resume_command, store_home, with_home
from loop_agents_cli.store_errors import store_problem


@dataclass
class Printer:
    """Where a run's lines go: the console, or (``--json``) stderr, keeping stdout JSON."""

    view: LoopConsole | None

    def say(self, line: str) -> None:
        """Print a line of news about the run."""
        if self.view is None:
            print(f"{PROG}: {line}", file=sys.stderr, flush=True)
        else:
            self.view.console.print(
                line, style="dim", markup=False, highlight=False, soft_wrap=True
            )


@dataclass(frozen=True)
class Resuming:
    """How to print the command that resumes a run (`resume_command`)."""

    as_json: bool
    env_file: Path | None
    home: Path | None

    def command(self, run_id: str, method: str | None = None) -> str:
        """The command that resumes ``run_id`` (asking for ``method`` when given)."""
        return resume_command(
            run_id, as_json=self.as_json, env_file=self.env_file, home=self.home, method=method
        )


def run(args: argparse.Namespace) -> int:
    """``loop-agents run``: save and run the loop that `check_run` checked the input of."""
    endpoint: Endpoint = args.endpoint  # resolved by the check, not started yet
    store = None if args.no_save else RunStore(store_home(args.environment.values))
    if store is not None:
        store.prepare()
    spec = RunSpec(
        task=str(args.task),
        rubric=args.rubric,
        check=args.check,
        check_timeout=args.check_timeout,
        threshold=args.threshold,
        max_iterations=args.max_iterations,
        system=args.system or DEFAULT_SYSTEM,
        cwd=os.getcwd(),
        endpoint=endpoint.spec,
        select=args.select,
        inside=args.inside_agent,
    )
    return execute(spec, endpoint, store, as_json=args.json, env_file=args.env_file)


def resume(args: argparse.Namespace) -> int:
    """``loop-agents resume RUN_ID``: go on with the saved run `check_saved_run` found.

    ``--structured-output`` replaces the saved way of asking for the judge's verdict
    (and is saved with the run).
    """
    store: RunStore = args.store
    saved: SavedRun = args.saved
    if saved.state == "finished":
        print(
            f"{PROG}: run {saved.run_id} has finished ({saved.stop_reason}); nothing to "
            f"resume. `{with_home(f'{PROG} show {saved.run_id}', store.folder)}` prints it.",
            file=sys.stderr,
        )
        from loop_agents_cli.show_command import print_run

        return print_run(store, saved, as_json=args.json)
    try:
        spec = RunSpec.from_dict(saved.settings)
        method: StructuredOutputMethod | None = args.structured_output
        if method is not None and method != spec.endpoint.structured_output_method:
            endpoint_spec = dataclasses.replace(spec.endpoint, structured_output_method=method)
            spec = dataclasses.replace(spec, endpoint=endpoint_spec)
            store.update(saved.run_id, settings=spec.to_dict())
        endpoint = endpoint_from_spec(spec.endpoint, environment=Environment.read(args.env_file))
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    return execute(
        spec, endpoint, store, as_json=args.json, env_file=args.env_file, run_id=saved.run_id
    )


def execute(
    spec: RunSpec,
    endpoint: Endpoint,
    store: RunStore | None,
    *,
    as_json: bool,
    env_file: Path | None,
    run_id: str | None = None,
) -> int:
    """Open the endpoint, run (or resume) the loop, print the result; return the status."""
    view = None if as_json else LoopConsole()
    out = Printer(view)
    resuming = run_id is not None
    again = Resuming(as_json, env_file, store.folder if store is not None else None)
    try:
        if endpoint.spec.kind == "local":
            out.say("starting the bundled llama.cpp server ...")
        # a run without a rubric has no judge: no judge's server is started for it
        with contextlib.closing(endpoint.open(judge=spec.rubric is not None)):
            out.say(endpoint.describe())
            check_prompt_size(spec, endpoint)  # before any model call and any saving
            if run_id is None:
                run_id = "unsaved"
                if store is not None:
                    run_id = store.create(spec.task, spec.to_dict(), spec.max_iterations)
            elif store is not None:
                store.update(run_id, status="running", pid=os.getpid(), error=None)
            if store is not None:
                out.say(f"run {run_id} · saved in {store.path}")
            else:
                out.say("run not saved (--no-save)")
            progress = Progress()
            stopped = run_id  # for the closure: the id of the run Ctrl-C interrupts
            ctrl_c = CtrlC(lambda: _interrupted(store, stopped, progress, spec, again))

            def fix(method: str) -> str:
                asked = f"pass --structured-output {method} to ask for it at once"
                if resuming:
                    return f"resume it with `{again.command(stopped, method)}` next time"
                if store is None:
                    return asked
                return f"{asked} (this run: `{again.command(stopped, method)}`)"

            session = run_session(
                spec,
                endpoint,
                store=store,
                run_id=run_id,
                view=view,
                progress=progress,
                resuming=resuming,
                say=out.say,
                fix=fix,
                ctrl_c=ctrl_c,
            )
            outcome = run_interruptible(session, ctrl_c, endpoint)
    except SettingsError as exc:
        raise UsageError(str(exc)) from exc
    except LocalModelError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 1
    return _report(outcome, store, run_id, view, again)


def _interrupted(
    store: RunStore | None, run_id: str, progress: Progress, spec: RunSpec, again: Resuming
) -> None:
    if store is None:
        print(
            f"\n{PROG}: interrupted; the run was not saved (--no-save), so it cannot be resumed",
            file=sys.stderr,
        )
        return
    with contextlib.suppress(sqlite3.Error):  # a write cut off by Ctrl-C may hold the file
        store.update(run_id, status="interrupted", pid=None, timeout=0.3)
    done = f"{progress.iterations} of {spec.max_iterations} iterations are saved"
    print(
        f"\n{PROG}: interrupted; {done}. Resume the run with:\n  {again.command(run_id)}",
        file=sys.stderr,
        flush=True,
    )


def _report(
    outcome: Outcome, store: RunStore | None, run_id: str, view: LoopConsole | None, again: Resuming
) -> int:
    failure = outcome.failure
    saved_id = run_id if store is not None else None
    result = result_json(
        outcome.values,
        run_id=saved_id,
        error=failure.error if failure else None,
        failure=failure.reason if failure else None,
    )
    problem = outcome.store_error
    if store is not None and problem is None:
        records = result["records"]
        scores = [r["score"] for r in records if r.get("score") is not None]
        try:
            store.update(
                run_id,
                status="finished" if outcome.finished else "failed",
                stop_reason=result["stop_reason"],
                iterations=len(records),
                best_score=max(scores) if scores else None,
                error=failure.error if failure else None,
                pid=None,
            )
        except InputError as exc:
            problem = exc.__cause__ or exc
    if view is None:
        print(json.dumps(result, ensure_ascii=False, indent=2))
    else:
        if failure is not None:
            view.failed(failure.reason)
        if result["answer"]:
            view.print_answer(result["answer"])
    if problem is not None and store is not None:
        # the answers made so far are printed above, and their steps are in the file
        raise store_problem(problem, store.path, resume=again.command(run_id))
    if failure is None:
        return 0
    print(f"{PROG}: error: {failure.error}", file=sys.stderr)
    if saved_id is not None and failure.resumable:
        command = again.command(saved_id, failure.method)
        print(f"{PROG}: the run is saved; resume it with: {command}", file=sys.stderr)
    return 1
