"""The Kafka wire protocol: bytes in, annotated Field trees out.

No I/O, no scapy, no rich: this package could be published on its own, and it
never imports ``analyzer``.
"""
