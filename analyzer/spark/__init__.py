"""The Spark job behind ``kafkawire-sniff spark``: many and huge captures, the figures of one
process. Its tasks run the stages the other commands run (the core, ``Pipeline``, the
tables' rows, ``Stories``, ``Checker``); `stats`' figures are the queries ``stats`` runs
(``analyzer.figures``), in Spark SQL over the job's exchanges and batches tables. The
package adds the cutting and the gluing, a module a step: ``inputs`` (what the job is
given), ``plan`` (ranges, boundaries, reads, tasks), ``tasks`` (what executors run),
``gather`` (merging on the driver, and the figures' report), ``outputs`` (the tables
written), ``session`` (the SparkSession), and ``job``, which calls them in that order.

Known differences from one process, all rare: a pcapng simple packet block (no timestamp)
at the very start of a range takes time 0 instead of the previous packet's; the core's
reassembly forgets closed connections after 10000 newer ones closed, which one process
counts over the whole file and a task over its connections only.
"""
