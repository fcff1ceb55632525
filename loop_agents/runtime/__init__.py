"""Running calls reliably, whatever the loop: the layer under the loop's core.

Nothing here knows what a loop is. `steps` runs programs written once for ``invoke`` and
``ainvoke`` (each paid call a LangGraph task when a node makes several); `time_limits`
abandons a call at its deadline; `usage` counts the tokens of the chat-model calls made
while a part runs; `thread_locking` holds a thread for one run at a time, in one process
and across processes (`_process_locks`, `_inode_locks`, `_postgres_locks`); and the
helpers the layers above share: `_sync_bridge` (async code from sync methods),
`_worker_threads`, `_function_runnable` (a runnable with a sync and an async path),
`_numbers` (reading numbers from outside).
"""
