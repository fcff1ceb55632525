"""The loop's core: what both hosts run, written once, knowing neither host.

Above the runtime (`loop_agents.runtime`), below the controls and the hosts; its modules
are described in ``docs/architecture.md``.
"""
