"""The loop's two hosts: a LangGraph graph, and middleware inside ``create_agent``.

Both run the same core (`loop_agents.loop.nodes.LoopNodes`) with the same controls and
the same defaults; each adapts it to where it runs:

- `graph`: `create_loop_agent`, the loop as a graph of two nodes (``invoke_agent``,
  with the agent call in `agent_step`, and ``evaluate``), compiled into a `LoopAgent`
  (`loop_agent`: the compiled graph whose runs check their input and hold their thread);
- `middleware`: `LoopMiddleware`, the loop at the points of a ``create_agent`` agent
  (``before_agent``, ``wrap_model_call``, ``after_agent``), its keys in the agent's state
  under ``loop_`` names (`middleware_state`, made from `loop_agents.loop.state.LoopState`).
"""
