"""The embedded engine: DuckDB over the tables' Parquet (``analyzer.tables``), and the figures
of ``stats`` as queries it runs (``analyzer.figures``).

``sql`` and ``stats`` write the tables of their captures as Parquet in a temporary folder
(``export``'s writer) and query them here: DuckDB reads them as it reads any Parquet, memory
stays within ``MEMORY_LIMIT``, and it spills to that folder when a query needs more.

The worker processes of ``stats --jobs`` each write the tables of their share of a capture's
connections (``Part``); a connection is numbered there by its first packet, and a topic id
another share learnt is named only after the fact: the views over the parts number the
connections and name the topics as one process does.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from analyzer import figures
from analyzer.tables import EXCHANGES, STRUCTS, TABLES

# DuckDB's memory for a query: what it needs beyond this it spills to disk (with the
# process's own, ~100 MB of Python, pyarrow and DuckDB, the whole stays under 200 MB)
MEMORY_LIMIT = "96MB"


@dataclass
class Part:
    """The tables one worker wrote (``folder``) of its share of a capture's connections, each
    numbered there by its first packet (``write_firsts``: a connection's number in the
    capture is the rank of its first packet among every share's), with the topic ids it
    names after the fact."""
    folder: str
    rename: dict[str, str] = field(default_factory=dict)


FIRSTS = "firsts"       # a part's table of its connections' first packets (capture, first)


def write_firsts(folder: str, capture: str, firsts: Sequence[int]) -> None:
    """The first packets of the connections a worker saw, for the numbering of ``connect``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(os.path.join(folder, FIRSTS), exist_ok=True)
    pq.write_table(pa.table({"capture": pa.array([capture] * len(firsts), pa.string()),
                             "first": pa.array(firsts, pa.int64())}),
                   os.path.join(folder, FIRSTS, "part-00000.parquet"))


def give_back_memory() -> None:
    """Hand the memory the tables' writing freed back to the system before DuckDB runs
    (glibc keeps freed blocks for the process otherwise), so the two do not add up."""
    import ctypes
    import gc

    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):     # (not glibc: nothing to trim)
        pass


def _files(folders: Sequence[str], table: str) -> str | None:
    globs = [os.path.join(f, table, "*.parquet") for f in folders if os.path.isdir(os.path.join(f, table))]
    if not globs:
        return None
    return "read_parquet([" + ", ".join(_text(g) for g in globs) + "], union_by_name = true)"


def _text(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _renamed(topic: str, names: Mapping[str, str]) -> str:
    """SQL of ``topic`` with the ids of ``names`` replaced by their names."""
    if not names:
        return topic
    whens = " ".join(f"WHEN {_text(k)} THEN {_text(v)}" for k, v in sorted(names.items()))
    return f"CASE {topic} {whens} ELSE {topic} END"


def _names_topics(type_name: str) -> bool:
    """Whether values of the column type ``type_name`` hold a topic (a struct with one, or a
    list of them)."""
    inner = type_name[5:-1] if type_name.startswith("list<") else type_name
    return inner in STRUCTS and any(c.name == "topic" or _names_topics(c.type) for c in STRUCTS[inner])


def _renamed_value(expr: str, type_name: str, names: Mapping[str, str], depth: int = 0) -> str:
    """SQL of ``expr`` (of the column type ``type_name``) with the topics it holds renamed."""
    if type_name.startswith("list<"):
        var = f"x{depth}"
        return f"list_transform({expr}, lambda {var}: {_renamed_value(var, type_name[5:-1], names, depth + 1)})"
    if type_name not in STRUCTS:
        return expr
    fields = ", ".join(f"'{c.name}': " + (_renamed(f"{expr}.{c.name}", names) if c.name == "topic"
                                          else _renamed_value(f"{expr}.{c.name}", c.type, names, depth))
                       for c in STRUCTS[type_name])
    return f"CASE WHEN {expr} IS NULL THEN NULL ELSE {{{fields}}} END"


def _part_view(table: str, parts: Sequence[Part], rename: Mapping[str, str]) -> str | None:
    """SQL of the workers' rows of ``table`` in ``parts``, their connections numbered
    (``conn_numbers``) and the topic ids of ``rename`` named (one scan of them all)."""
    src = _files([p.folder for p in parts], table)
    if src is None:
        return None
    repl = ["c.n AS conn"]
    if rename:
        for c in {t.name: t for t in TABLES}[table].columns:
            if c.name == "topic":
                repl.append(f"{_renamed('t.topic', rename)} AS topic")
            elif _names_topics(c.type):
                repl.append(f"{_renamed_value('t.' + c.name, c.type, rename)} AS {c.name}")
    return (f"SELECT t.* REPLACE ({', '.join(repl)}) FROM {src} t "
            "JOIN conn_numbers c ON c.capture = t.capture AND c.first = t.conn")


def connect(folders: Sequence[str], spill: str, parts: Sequence[Part] = (), ordered: bool = True) -> Any:
    """A DuckDB connection with a view per table over the Parquet of ``folders`` and of the
    workers' ``parts``, and the figures of ``stats`` as views over them (``figures.views``).
    ``ordered``: a query with no ORDER BY gives rows in the tables' order (``sql``'s users
    see it); the figures order what they give, and their scans need not hold rows for it."""
    import duckdb

    db = duckdb.connect(config={"memory_limit": MEMORY_LIMIT, "temp_directory": spill,
                                "preserve_insertion_order": ordered})
    if parts:
        firsts = _files([p.folder for p in parts], FIRSTS)
        db.execute("CREATE TABLE conn_numbers AS SELECT capture, first, "
                   f"row_number() OVER (PARTITION BY capture ORDER BY first) - 1 AS n FROM {firsts}")
    have_exchanges = False
    for t in TABLES:
        selects = []
        whole = _files(folders, t.name)
        if whole is not None:
            selects.append(f"SELECT * FROM {whole}")
        # (the parts that name no topic after the fact in one scan: a view of many parts, as
        # many captures read by workers make, stays within the memory limit)
        views = [_part_view(t.name, [p for p in parts if not p.rename], {})]
        views += [_part_view(t.name, [p], p.rename) for p in parts if p.rename]
        selects += [v for v in views if v is not None]
        if selects:
            db.execute(f"CREATE VIEW {t.name} AS " + "\nUNION ALL BY NAME\n".join(selects))
            have_exchanges = have_exchanges or t is EXCHANGES
    if have_exchanges:
        for name, query in figures.views().items():
            db.execute(f"CREATE VIEW {name} AS {query}")
    return db


def rows_db(tables: Sequence[tuple[Any, Sequence[tuple[Any, ...]]]]) -> Any:
    """A DuckDB connection holding, for each (``analyzer.tables.Table``, rows), that table's rows
    (tuples in its column order) under its name: small tables of rows made in Python."""
    import duckdb
    import pyarrow as pa

    from analyzer.tables import arrow_schema

    db = duckdb.connect()
    for t, rows in tables:
        schema = arrow_schema(t)
        cols = list(zip(*rows, strict=True)) if rows else [() for _f in schema]
        db.register(t.name, pa.Table.from_arrays([pa.array(list(c), type=f.type)
                                                  for c, f in zip(cols, schema, strict=True)], schema=schema))
    return db


def query_of(db: Any) -> figures.Query:
    """``figures.Query`` on a DuckDB connection. A query that runs out of the memory limit is
    run again on one thread, and so are the next ones: each thread holds buffers of its own,
    and one spills what two cannot."""
    import duckdb

    def run(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        try:
            cur = db.execute(sql)
        except duckdb.OutOfMemoryException:
            if db.execute("SELECT current_setting('threads')").fetchone()[0] == 1:
                raise
            db.execute("SET threads = 1")
            cur = db.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()
    return run
