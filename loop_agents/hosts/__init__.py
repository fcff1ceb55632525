"""The loop's two hosts, running the same core with the same controls and defaults.

`graph`: `create_loop_agent`, the loop as a LangGraph graph (a `LoopAgent`); `middleware`:
`LoopMiddleware`, the loop inside a ``create_agent`` agent.
"""
