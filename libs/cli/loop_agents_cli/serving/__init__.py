"""Loops for other programs: LangGraph Server entry points, configurable loops, loop-as-tool.

- `graphs`: the graph factories ``langgraph.json`` serves (the Song-lyrics demo and the
  configurable loop), built from the environment's model settings;
- `eval_task`: the served graph that runs one eval task under one arm
  (``loop-agents eval --server``);
- `configurable`: `configurable_loop`, a loop whose task, rubric and pass mark are
  chosen per run;
- `tool`: `loop_as_tool`, a loop offered to a tool-calling agent as a tool.
"""
