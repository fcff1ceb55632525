"""Running calls reliably, whatever the loop: the layer under the loop's core.

Nothing here knows what a loop is: `steps` (programs written once for ``invoke`` and
``ainvoke``), `time_limits`, `usage` (tokens of the model calls), `thread_locking` (one
run at a time on a thread, across processes too), and the helpers the layers above share.
"""
