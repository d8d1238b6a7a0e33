"""One capture analysed by several processes, each taking a share of its TCP connections.

``stats --jobs N`` (and ``check --jobs N``) forks N workers. Every worker reads the whole file (reading is the
cheap part: see benchmarks/) but feeds to its own ``Pipeline`` only the packets of its
connections: the core (``Options.share``) hashes the addresses and ports of a packet
symmetrically, so both directions of a connection, and every later connection on the
same 4-tuple (port reuse), go to the same worker. A packet that is not TCP goes to worker 0, which counts
it as one process would. A worker of ``stats`` writes the tables of its share (``Part``: the
parent's engine queries them together) and returns the state of its ``Stories``; one of
``check`` returns its ``Checker``; the parent merges them.

What one process shares across connections is restored when merging:

- connection numbers: a worker numbers a connection by its first packet
  (``Options.conn_ids_from_index``); the parent ranks those first packets over all
  workers, which gives the numbers one process gives (order of first packet);
- topic ids (Fetch v13+ names topics by id; one process resolves an id with the name
  learnt from a Metadata response seen earlier on any connection): a worker's
  ``TopicNames`` records what it learns (as runs: an entry per id and name, however many
  answers repeat it) and the ids it looked up in vain. An id that
  another worker learnt, with one name, before the first vain lookup is renamed in the
  worker's figures, which is what one process reports. An id learnt *between* a
  worker's vain lookups cannot be restored from the figures: the capture is then
  analysed again in one process (``ShardedResult.exact`` is False and the caller does so).

``TopicNames`` and ``rename_topics`` are shared with the Spark job (analyzer.spark),
which splits captures by connection the same way across a cluster.
"""
from __future__ import annotations

import bisect
import dataclasses
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.connection import wait as wait_for
from typing import Any, NamedTuple

from analyzer._core import END_OF_CAPTURE, CaptureError, open_capture
from analyzer.engine import Part, write_firsts
from analyzer.pipeline import AUTO_LISTED, Options, Run, merge_connections
from analyzer.runs import Decode, fresh_context
from analyzer.sinks.stats import COSTLY_VIEWS, Stories
from analyzer.tables import CORE_TABLES, open_writers, table_run
from dissectors.context import DecodeContext

__all__ = ["END_OF_CAPTURE", "TopicNames", "Learnt", "LearntTable", "auto_jobs", "run_stats_sharded", "ShardedResult",
           "run_check_sharded", "ShardedCheck", "MIN_SHARDED_BYTES"]

# below this size a capture is analysed in one process (forking and reading the file
# again in every worker would cost more than it saves)
MIN_SHARDED_BYTES = 8 * 1024 * 1024
MAX_AUTO_JOBS = 8
# the Parquet compression of the tables a run writes for its own queries (read once, soon)
TEMPORARY = "lz4"
# the tables stats' figures read
FIGURES_TABLES = CORE_TABLES
class Learnt(NamedTuple):
    """What a file's connections learnt of one topic id (``learnt_ids``)."""
    at: list[int]           # the packets of its learnings, sorted
    names: list[str]        # the name each learnt
    exact: bool             # the learnings replay as one process met them
    one_name: bool          # every learning gave the same name


# what a file's connections learnt: topic id -> its Learnt
LearntTable = dict[str, Learnt]


# -- topic ids across connections ----------------------------------------------------------------

class TopicNames(dict):
    """``DecodeContext.topic_names`` for a share of a capture's connections.

    Records what it learns (packet number, topic id, name) and, per topic id, the first
    and last packet at which a lookup found nothing; ``now`` is the number of the packet
    being fed. With ``known`` (what the whole file learnt: topic id -> (sorted packet
    numbers, names)) it answers as one process would at packet ``now``: the name learnt
    most recently before it, on any connection.
    """

    def __init__(self, known: LearntTable | None = None) -> None:
        super().__init__()
        self._now = 0
        # while set, ``now`` is the number of the packet its pipeline is handling
        # (Pipeline.packet_now: END_OF_CAPTURE once the capture is read)
        self.source: Any = None
        self.known = known
        # what it learnt, as runs: [first, last, topic id, name, learnings] for each stretch of
        # packets in which an id was learnt again and again under one name (clients ask for
        # Metadata every few minutes and every answer names every topic: the memory grows with
        # the names an id takes, not with the answers). See learnt_ids
        self.learnt: list[list[Any]] = []
        self._runs: dict[str, list[Any]] = {}      # topic id -> its latest run
        self.misses: dict[str, list[int]] = {}     # topic id -> [first, last] packet of a failed lookup

    @property
    def now(self) -> int:
        src = self.source
        return self._now if src is None else src.packet_now

    @now.setter
    def now(self, value: int) -> None:
        self._now = value

    def __bool__(self) -> bool:            # `names or {}` must keep this object
        return True

    def __setitem__(self, k: str, v: str) -> None:
        super().__setitem__(k, v)
        now = self.now
        run = self._runs.get(k)
        if run is not None and run[3] == v:
            run[1] = now
            run[4] += 1
        else:
            run = self._runs[k] = [now, now, k, v, 1]
            self.learnt.append(run)

    def get(self, k: Any, default: Any = None) -> Any:
        if dict.__contains__(self, k):
            return dict.__getitem__(self, k)
        if self.known is not None:
            ent = self.known.get(k)
            if ent is not None:
                i = bisect.bisect_left(ent.at, self.now)
                if i:
                    return ent.names[i - 1]
        if isinstance(k, str):
            m = self.misses.get(k)
            if m is None:
                self.misses[k] = [self.now, self.now]
            elif self.now > m[1]:
                m[1] = self.now
        return default


def learnt_ids(learnt: Iterable[Sequence[Any]]) -> LearntTable:
    """topic id -> ``Learnt`` (sorted packet numbers, names, exact, one name) of a file's learnings, from the runs
    of ``TopicNames.learnt``: the packets where each run began and ended.

    The learnings inside a run, which are not kept, repeat its name: the name learnt last
    before any packet is that of the latest of these ends, and the first learning and the
    names of an id are exact, unless a learning of another name fell strictly inside a run
    that had learnings between its ends. Then ``exact`` is False for the id (only an id
    given two names, on connections interleaved in time, can be so).
    """
    ev: dict[str, set[tuple[int, str]]] = {}
    runs: dict[str, list[tuple[int, int, str, int]]] = {}
    for first, last, tid, nm, count in learnt:
        s = ev.setdefault(tid, set())
        s.add((first, nm))
        s.add((last, nm))
        runs.setdefault(tid, []).append((first, last, nm, count))
    out: LearntTable = {}
    for tid, s in ev.items():
        items = sorted(s)
        at = [i for i, _ in items]
        names = [n for _, n in items]
        exact = True
        one_name = len(set(names)) == 1
        if not one_name:
            for first, last, nm, count in runs[tid]:
                if count > 2 and any(names[j] != nm for j in range(bisect.bisect_right(at, first),
                                                                    bisect.bisect_left(at, last))):
                    exact = False
                    break
        out[tid] = Learnt(at, names, exact, one_name)
    return out


def resolve_misses(misses: dict[str, list[int]], table: LearntTable,
                   rename: bool = True) -> tuple[dict[str, str], bool]:
    """(ids to rename, exact) for one share's vain lookups against the file's learnings.

    An id nobody had learnt before the share's last vain lookup stays an id (one process
    could not resolve it either); one learnt, with a single name, before the first vain
    lookup is renamed (unless ``rename`` is False: the Spark job's field trees carry the
    name in notes, which renaming figures cannot fix); anything else (learnt between
    lookups, several names) is not exact.
    """
    names: dict[str, str] = {}
    exact = True
    for tid, (first, last) in misses.items():
        ent = table.get(tid)
        if ent is None or ent.at[0] >= last:
            continue
        if rename and ent.at[0] < first and ent.one_name:
            names[tid] = ent.names[0]
        else:
            exact = False
    return names, exact


# -- sharding ------------------------------------------------------------------------------------

def auto_jobs(paths: Iterable[str]) -> int:
    """Workers for ``--jobs 0``: the usable CPUs (at most 8) when a capture is big enough."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:          # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    if cpus < 2:
        return 1
    for p in paths:
        try:
            if os.path.isfile(p) and os.path.getsize(p) >= MIN_SHARDED_BYTES:
                return min(cpus, MAX_AUTO_JOBS)
        except OSError:
            pass
    return 1


# -- running ---------------------------------------------------------------------------------------

@dataclass
class ShardedResult:
    stories: Stories
    parts: list[Part]                  # the tables each worker wrote
    exact: bool                        # False: a topic id was learnt between lookups: run again unsharded
    capture_warning: str | None = None  # the reader's (every worker reads the whole file)
    connections: dict[str, Any] | None = None   # the workers' Summary.connections_json, merged


def _share(path: str, options: Options, ctx: DecodeContext, k: int, n: int,
           progress: Any) -> tuple[Run, TopicNames]:
    """The Run of worker ``k`` of ``n`` over its share of the connections, and the topic
    names it learns and looks up."""
    names = TopicNames()
    wctx = fresh_context(ctx)
    wctx.topic_names = names
    # the core keeps only this worker's share of the connections (both directions of a
    # connection, and every later one on its 4-tuple, fall in one share; packets that are
    # not TCP in share 0)
    opts = dataclasses.replace(options, conn_ids_from_index=True, share=(k, n))
    tick = None
    if progress is not None:
        def tick(done: int, _total: int) -> None:
            progress[k] = done
    run = Run(path, opts, wctx, progress=tick)
    names.source = run.pipeline
    return run, names


def core_tables(decode: Decode, stories: Stories, display_filter: Any) -> bool:
    """Whether the core builds the tables of a run of ``stats`` (``Options.tables``): a lean
    walk's, unless a display filter reads each exchange or the stories read every one (the
    in-flight view); the exchanges then make their rows in Python."""
    return decode.lean and display_filter is None and not stories.every_exchange


def _worker(path: str, options: Options, ctx: DecodeContext, k: int, n: int, progress: Any,
            folder: str, views: tuple[str, ...], display_filter: Any) -> dict[str, Any]:
    stories = Stories(views)
    tabled = core_tables(options.decode, stories, display_filter)
    options = dataclasses.replace(options, tables=path if tabled else None, hand=stories.keys if tabled else frozenset(),
                                  hand_failed=stories.failed_keys if tabled else frozenset())
    run, names = _share(path, options, ctx, k, n, progress)
    writers = open_writers(folder, FIGURES_TABLES, compression=TEMPORARY)
    keep = display_filter.matcher(run.ctx) if display_filter is not None else None
    try:
        table_run(path, run, writers, stories=stories.add, keep=keep)
    finally:
        for w in writers.values():
            w.close()
    write_firsts(folder, path, run.pipeline.stream.first_indexes)
    # (the ids the core's rows could not name, with the front's)
    for tid, first, last in run.pipeline.stream.topic_misses():
        m = names.misses.setdefault(tid, [first, last])
        m[0], m[1] = min(m[0], first), max(m[1], last)
    # the connections this worker saw, by first packet (their ids, with conn_ids_from_index)
    return {"stories": stories.to_state(), "conns": run.pipeline.stream.first_indexes,
            "learnt": names.learnt, "misses": names.misses,
            "warning": run.summary.capture_warning, "connections": run.summary.connections_json()}


def _check_worker(path: str, options: Options, ctx: DecodeContext, k: int, n: int, progress: Any,
                  checker_args: dict[str, Any]) -> dict[str, Any]:
    from analyzer.sinks.check import Checker

    run, names = _share(path, options, ctx, k, n, progress)
    checker = Checker(**checker_args)
    for ex in run:
        checker.add(ex)
    checker.encrypted(run.summary)
    return {"checker": checker, "learnt": names.learnt, "misses": names.misses,
            "last_ts": run.summary.last_ts, "warning": run.summary.capture_warning}


def _child(conn: Any, work: Callable[..., dict[str, Any]], *args: Any) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)      # the parent handles ^C and ends its workers
    try:
        conn.send(("ok", work(*args)))
    except CaptureError as e:
        conn.send(("error", str(e)))
    except MemoryError:
        conn.send(("error", "out of memory"))
    except BaseException as e:      # reported by the parent as a one-line error
        conn.send(("error", f"worker failed: {type(e).__name__}: {e}"))
    finally:
        conn.close()


def run_stats_sharded(path: str, options: Options, ctx: DecodeContext, folder: str, jobs: int,
                      source: str | None = None, views: Iterable[str] = COSTLY_VIEWS,
                      progress: Callable[[int, int], None] | None = None,
                      display_filter: Any = None) -> ShardedResult:
    """One capture analysed by ``jobs`` forked workers (see module doc): the tables each
    wrote (in sub-folders of ``folder``) and their stories, merged (``display_filter``: of
    the exchanges it selects, ``analyzer.display_filter``; one worker should read them all).

    Raises ``CaptureError`` when the capture cannot be read (checked before forking, and
    as reported by a worker)."""
    views = tuple(views)
    folders = [os.path.join(folder, f"w{k}") for k in range(jobs)]
    states = _run_workers(path, options, ctx, jobs, progress, _worker, views, display_filter, folders=folders)
    return _merge(path, states, folders, source, views)


@dataclass
class ShardedCheck:
    checker: Any                        # analyzer.sinks.check.Checker, the workers' merged
    last_ts: float | None               # the capture's last packet time (every worker reads it all)
    exact: bool                         # False: a topic id was learnt on another worker's connections
    capture_warning: str | None = None


def run_check_sharded(path: str, options: Options, ctx: DecodeContext, checker_args: dict[str, Any],
                      jobs: int, progress: Callable[[int, int], None] | None = None) -> ShardedCheck:
    """The ``Checker`` of one capture analysed by ``jobs`` forked workers, merged (the
    rules that follow several connections judge at ``finish``, after the merge). Topic ids
    are not renamed after the fact: a finding's text names the topic, so a capture where a
    worker looked up an id another worker learnt is not ``exact`` (analyse it again in
    one process)."""
    from analyzer.sinks.check import Checker

    states = _run_workers(path, options, ctx, jobs, progress, _check_worker, checker_args)
    table = learnt_ids(ev for st in states for ev in st["learnt"])
    exact = True
    checker = Checker(**checker_args)
    for st in states:
        names, ok = resolve_misses(st["misses"], table)
        exact = exact and ok and not names
        checker.merge(st["checker"])
    last = [st["last_ts"] for st in states if st["last_ts"] is not None]
    return ShardedCheck(checker, max(last) if last else None, exact, states[0]["warning"] if states else None)


def _run_workers(path: str, options: Options, ctx: DecodeContext, jobs: int,
                 progress: Callable[[int, int], None] | None, work: Callable[..., dict[str, Any]],
                 *args: Any, folders: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``work(path, options, ctx, k, jobs, progress, [folders[k],] *args)`` in ``jobs``
    forked workers (k from 0), their results in that order."""
    with open_capture(path) as reader:      # a bad file fails here, once, before forking
        size = getattr(reader, "size", 0) or 0
    mp = multiprocessing.get_context("fork")
    shared = mp.Array("q", jobs, lock=False) if progress is not None else None
    procs = []
    pipes = []
    for k in range(jobs):
        recv, send = mp.Pipe(duplex=False)
        own = (folders[k],) if folders is not None else ()
        p = mp.Process(target=_child, args=(send, work, path, options, ctx, k, jobs, shared, *own, *args),
                       daemon=True)
        p.start()
        send.close()
        procs.append(p)
        pipes.append(recv)
    results: dict[int, dict[str, Any]] = {}
    error: str | None = None
    try:
        waiting = {pipes[k]: k for k in range(jobs)}
        while waiting:
            ready = wait_for(list(waiting), timeout=0.25)
            if progress is not None and shared is not None:
                progress(min(shared[:]), size)
            for r in ready:
                assert isinstance(r, Connection)    # wait() returns some of the pipes it was given
                k = waiting.pop(r)
                try:
                    status, payload = r.recv()
                except EOFError:
                    status, payload = "error", f"worker {k} ended without a result (exit code {procs[k].exitcode})"
                if status == "ok":
                    results[k] = payload
                elif error is None:
                    error = payload
            if error is not None:
                break
    finally:
        for p in procs:
            if p.is_alive() and (error is not None or len(results) < jobs):
                p.terminate()
            p.join()
    if error is not None:
        raise CaptureError(error)
    return [results[k] for k in range(jobs)]


def _merge(path: str, states: list[dict[str, Any]], folders: list[str], source: str | None,
           views: tuple[str, ...]) -> ShardedResult:
    firsts = sorted(i for st in states for i in st["conns"])

    def number(first: int) -> int:
        return bisect.bisect_left(firsts, first)

    table = learnt_ids(ev for st in states for ev in st["learnt"])
    total = Stories(views)
    parts = []
    exact = True
    for st, folder in zip(states, folders, strict=True):
        names, ok = resolve_misses(st["misses"], table)
        exact = exact and ok
        total.merge(Stories.from_state(st["stories"]).renumber_conns(number, source))
        parts.append(Part(folder, names))
    connections = None
    listed = []
    for st in states:
        c = st["connections"]
        listed += [{**a, "conn": number(a["conn"])} for a in c["auto_detected"]]
        connections = merge_connections(connections, {**c, "auto_detected": []})
    if connections is not None:
        # (each share lists its first connections: together, the capture's first ones)
        connections["auto_detected"] = sorted(listed, key=lambda a: a["conn"])[:AUTO_LISTED]
    return ShardedResult(total, parts, exact, states[0]["warning"] if states else None, connections)
