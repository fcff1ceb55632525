"""The loop's two hosts, with the same core, controls and defaults.

`graph`: `create_loop_agent`, the loop as a LangGraph graph; `middleware`: `LoopMiddleware`.
"""
