"""The commands, one module each (``<name>_command`` in ``analyzer.commands.<name>``): its
click options, how it wires the pipeline to its sinks, and its output; ``options`` holds
what they share. ``analyzer.cli`` only registers them."""
