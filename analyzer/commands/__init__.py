"""The commands besides `read` and `apis` (analyzer/cli.py), one module each: its click
options, how it wires the pipeline to its sinks, and its output; `options` holds the
options they share (capture selection, decoding limits, filters)."""
