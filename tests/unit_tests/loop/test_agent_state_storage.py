"""A graph agent's state is stored as what changed: linear storage, exact reads and resumes.

The agent (`tests.file_agents.file_agent`) adds one 2-20 kB file per attempt, as a deep
agent writing notes does. Before change sets every checkpoint held every file again
(and with ``select="best"`` every kept iteration too): the bytes grew 3.7-3.9 times each
time the iterations doubled. Now each checkpoint holds the file its step added, and the
bytes grow at most 2.4 times per doubling, on every saver, with the agent's files exact
after a failure and a resume, and threads of the earlier layout still load and go on.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel

from loop_agents import LoopContext, LoopEvaluation, create_loop_agent
from loop_agents.controls import AnswerSelection, Candidates
from loop_agents.loop import storage as storage_module
from loop_agents.loop.agent_state import CHANGES_MARK, applied, changes, selected_state, updated
from loop_agents.loop.storage import storage_of
from tests.durable_helpers import frequent_snapshot_keys, thread
from tests.file_agents import file_agent, files_after
from tests.savers import stored_bytes
from tests.unit_tests.loop.test_storage_migration import acopy_threads, copy_threads

REQUEST = HumanMessage("Write the notes.")


def never(context: LoopContext) -> LoopEvaluation:
    """Never accepts; iteration 2 scores 40, the others 0 to 2 (2 is always the best)."""
    iteration = context["iteration"]
    score = 40.0 if iteration == 2 else float(iteration % 3)
    return {"stop": False, "feedback": f"feedback {iteration}", "score": score}


# -- change sets ---------------------------------------------------------------------------


class Note(BaseModel):
    title: str


def random_state(draw: random.Random) -> dict[str, Any]:
    state: dict[str, Any] = {}
    for key in draw.sample(["files", "todos", "structured_response", "count", "extra"], 3):
        if key == "files":
            state[key] = {f"/{n}.md": draw.choice(["a", "b", {"content": "c"}]) for n in range(4)}
        elif key == "todos":
            state[key] = [draw.choice(["x", "y"]) for _ in range(draw.randint(0, 3))]
        elif key == "structured_response":
            state[key] = Note(title=draw.choice(["t1", "t2"]))
        else:
            state[key] = draw.choice([1, 2, None, {"k": draw.randint(0, 2)}])
    return state


@pytest.mark.parametrize("seed", range(40))
def test_a_change_set_turns_one_state_into_the_other(seed):
    draw = random.Random(seed)
    before, after = random_state(draw), random_state(draw)
    change = changes(before, after)
    assert applied(before, change) == after
    assert changes(after, after) is None
    # the reducer: change sets applied in order, in one batch or two, the same
    third = random_state(draw)
    writes = [changes(before, after), changes(after, third)]
    writes = [w if w is not None else {CHANGES_MARK: 1} for w in writes]
    assert updated(before, writes) == updated(updated(before, writes[:1]), writes[1:]) == third


def test_a_change_set_holds_only_the_files_that_changed():
    before = {"files": files_after(5), "todos": ["plan"]}
    after = {"files": {**files_after(5), "/file_6.md": "new"}, "todos": ["plan"]}
    change = changes(before, after)
    assert change == {
        CHANGES_MARK: 1,
        "put": {},
        "drop": [],
        "entries": {"files": {"put": {"/file_6.md": "new"}, "drop": []}},
    }
    assert applied(before, change) == after
    assert before["files"].keys() == files_after(5).keys()  # the state given is kept


def test_a_whole_mapping_replaces_the_state_and_other_writes_are_refused():
    assert updated({"files": {"/a": "x"}}, [{"todos": []}]) == {"todos": []}
    with pytest.raises(TypeError, match="agent_state is updated with a mapping"):
        updated({}, [["files"]])


def test_any_iteration_s_state_is_rebuilt_from_the_latest_and_the_undo_sets():
    states = [files_after(n) for n in range(1, 5)]
    entries = [
        {"iteration": n + 1, "undo": changes(states[n], states[n - 1] if n else {})}
        for n in range(4)
    ]
    for iteration in range(1, 5):
        assert selected_state(entries, iteration, states[-1]) == states[iteration - 1]
    assert selected_state(entries, 9, states[-1]) == {}
    # an entry of the earlier layout holds its state whole; later ones are undone onto it
    mixed = [{"iteration": 1, "state": states[0]}, {"iteration": 2, "state": states[1]}]
    mixed += entries[2:]
    assert selected_state(mixed, 2, states[-1]) == states[1]
    assert selected_state(mixed, 1, states[-1]) == states[0]


# -- what a thread stores ------------------------------------------------------------------


@pytest.mark.parametrize("select", ["last", "best"])
def test_the_bytes_grow_at_most_2_4_times_when_the_iterations_double(saver, select):
    stored = {}
    for iterations in (10, 20, 40):
        name = f"{select}-{iterations}"
        loop = create_loop_agent(
            file_agent(), never, iterations, checkpointer=saver, controls=[AnswerSelection(select)]
        )
        assert storage_of(loop) == "delta"
        result = loop.invoke({"messages": [REQUEST]}, thread(name), durability="sync")
        best = iterations if select == "last" else 2
        assert result["agent_state"] == {"files": files_after(best)}
        stored[iterations] = stored_bytes(saver, name)
    growth = [stored[20] / stored[10], stored[40] / stored[20]]
    assert max(growth) <= 2.4, (stored, growth)


@pytest.mark.parametrize("select", ["last", "best"])
@pytest.mark.parametrize("candidates", [1, 2])
def test_the_files_are_exact_after_a_failure_and_a_resume(saver, select, candidates):
    failed: list[int] = []

    def fails_once_at_3(context: LoopContext) -> LoopEvaluation:
        if context["iteration"] == 3 and not failed:
            failed.append(3)
            raise RuntimeError("the evaluator failed")
        if not second_loop:  # the files of every attempt so far
            assert context["agent_state"] == {"files": files_after(context["iteration"])}
        return never(context)

    seen: list[dict[str, str]] = []
    second_loop: list[bool] = []
    name = f"resume-{select}-{candidates}"
    loop = create_loop_agent(
        file_agent(seen), fails_once_at_3, 5, checkpointer=saver,
        controls=[Candidates(candidates), AnswerSelection(select)],
    )  # fmt: skip
    with pytest.raises(RuntimeError, match="the evaluator failed"):
        loop.invoke({"messages": [REQUEST]}, thread(name))
    saved = loop.get_state(thread(name)).values["agent_state"]
    if candidates == 1:
        assert saved == {"files": files_after(3)}  # attempt 3's file, saved before evaluation
    result = loop.invoke(None, thread(name))
    assert result["stop_reason"] == "max_iterations"
    assert result["selected_iteration"] == (5 if select == "last" else 2)
    assert result["agent_state"] == {"files": files_after(result["selected_iteration"])}
    assert loop.get_state(thread(name)).values["agent_state"] == result["agent_state"]
    assert seen[-1] == files_after(4)  # the last attempt was given every earlier file
    # a new run on the thread goes on from the selected iteration's files
    second_loop.append(True)
    start = len(seen)
    again = loop.invoke({"messages": [HumanMessage("More notes.")]}, thread(name))
    first = result["selected_iteration"]
    assert seen[start] == files_after(first)
    assert set(again["agent_state"]["files"]) >= set(files_after(first))


@pytest.fixture
def frequent_snapshots(monkeypatch):
    monkeypatch.setattr(storage_module, "DELTA_KEYS", frequent_snapshot_keys(2))


def test_snapshots_of_the_agent_state_read_back_exactly(saver, frequent_snapshots):
    loop = create_loop_agent(
        file_agent(), never, 6, checkpointer=saver, controls=[AnswerSelection("best")]
    )
    result = loop.invoke({"messages": [REQUEST]}, thread("snapshots"))
    assert result["agent_state"] == {"files": files_after(2)}
    stored = [
        "agent_state" in s.checkpoint["channel_values"] for s in saver.list(thread("snapshots"))
    ]
    assert any(stored)
    assert not all(stored)
    for snapshot in loop.get_state_history(thread("snapshots")):
        files = snapshot.values.get("agent_state", {}).get("files", {})
        assert files in (files_after(len(files)), files_after(2))


def test_a_delta_thread_reads_with_full_storage_and_back(saver):
    delta = create_loop_agent(
        file_agent(), never, 4, checkpointer=saver, controls=[AnswerSelection("best")]
    )
    delta.invoke({"messages": [REQUEST]}, thread("switch"))
    full = create_loop_agent(
        file_agent(),
        never,
        3,
        checkpointer=saver,
        controls=[AnswerSelection("best")],
        storage="full",
    )
    assert full.get_state(thread("switch")).values["agent_state"] == {"files": files_after(2)}
    result = full.invoke({"messages": [HumanMessage("Again.")]}, thread("switch"))
    assert result["agent_state"] == {"files": files_after(4)}  # 2 + the new loop's best (2nd)
    assert delta.get_state(thread("switch")).values["agent_state"] == result["agent_state"]


# -- threads of the earlier layout -----------------------------------------------------------

FIXTURE = Path(__file__).resolve().parents[2] / "data" / "agent_state_layout" / "threads.sqlite"
SIZES = (200, 2_000)  # the fixture's files (see its make_threads.py)


@pytest.fixture
def old_saver(saver, tmp_path):
    copy = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE, copy)
    with SqliteSaver.from_conn_string(str(copy)) as source:
        copy_threads(source, saver)
    return saver


def old_loop(saver: Any, seen: list[dict[str, str]] | None = None, **options: Any) -> Any:
    agent = file_agent(seen, sizes=SIZES)
    return create_loop_agent(
        agent, never, 4, checkpointer=saver, controls=[AnswerSelection("best")], **options
    )


def test_the_fixture_holds_the_earlier_layout():
    with SqliteSaver.from_conn_string(str(FIXTURE)) as source:
        saved = list(source.list(thread("finished")))
    values = saved[0].checkpoint["channel_values"]
    assert values["agent_state"] == {"files": files_after(2, SIZES)}  # whole, in the checkpoint
    entries = [
        entry
        for checkpoint in saved
        for _, channel, value in checkpoint.pending_writes or []
        if channel == "attempt_states"
        for entry in value
    ]
    assert sorted(e["iteration"] for e in entries) == [1, 2, 3, 4]
    assert all(set(e) == {"iteration", "state"} for e in entries)  # each state whole


@pytest.mark.parametrize("storage", ["auto", "full"])
def test_an_old_finished_thread_loads(old_saver, storage):
    values = old_loop(old_saver, storage=storage).get_state(thread("finished")).values
    assert values["agent_state"] == {"files": files_after(2, SIZES)}
    assert values["selected_iteration"] == 2


@pytest.mark.parametrize("storage", ["auto", "full"])
def test_an_old_failed_thread_resumes_and_chooses_among_old_and_new_iterations(old_saver, storage):
    seen: list[dict[str, str]] = []
    result = old_loop(old_saver, seen, storage=storage).invoke(None, thread("failed"))
    assert seen == [files_after(3, SIZES)]  # only iteration 4 ran, from the saved files
    assert [r["iteration"] for r in result["records"]] == [1, 2, 3, 4]
    assert result["selected_iteration"] == 2
    assert result["agent_state"] == {"files": files_after(2, SIZES)}


def test_a_new_run_on_an_old_thread_goes_on_from_its_files(old_saver):
    seen: list[dict[str, str]] = []
    loop = old_loop(old_saver, seen)
    result = loop.invoke({"messages": [HumanMessage("More.")]}, thread("finished"))
    assert seen[0] == files_after(2, SIZES)
    assert result["agent_state"] == {"files": files_after(4, SIZES)}  # the new loop's 2nd
    assert loop.get_state(thread("finished")).values["agent_state"] == result["agent_state"]


async def test_an_old_thread_resumes_on_an_async_saver(async_saver, tmp_path):
    copy = tmp_path / "old.sqlite"
    shutil.copy(FIXTURE, copy)
    with SqliteSaver.from_conn_string(str(copy)) as source:
        await acopy_threads(source, async_saver)
    result = await old_loop(async_saver).ainvoke(None, thread("failed"))
    assert result["agent_state"] == {"files": files_after(2, SIZES)}
    state = await old_loop(async_saver).aget_state(thread("failed"))
    assert state.values["agent_state"] == result["agent_state"]
