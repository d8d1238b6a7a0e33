"""Capture -> exchanges: sources, TCP reassembly, framing, pairing, sinks and the CLI."""
