"""``kafkawire-sniff check``: find client and broker bugs in captures.

Only wiring and drawing: the rules live in ``analyzer.sinks.check``. The command returns
its exit status (the main group exits with it): 0 when no finding has severity error, 1
otherwise.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from analyzer.commands.options import capture_options, filter_option, iter_captures, jobs_option, rule_list
from analyzer.errors import stdout_console, warn_damaged
from analyzer.runs import Decode, lean_decode
from analyzer.sinks.check import RULES, SEVERITIES, Checker, Finding, count_by_severity

SEVERITY_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


@click.command("check")
@click.argument("captures", nargs=-1, type=click.Path())
@click.option("--rule", "rules", multiple=True, callback=rule_list, metavar="RULE",
              help="Only this rule (repeatable, or comma-separated).")
@click.option("--skip-rule", "skip_rules", multiple=True, callback=rule_list, metavar="RULE",
              help="Not this rule (repeatable, or comma-separated).")
@click.option("-f", "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
              help="Output format.")
@click.option("--timeline", "timeline_group", metavar="GROUP",
              help="Print this consumer group's story (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, "
                   "OffsetCommit, ConsumerGroupHeartbeat) instead of the findings.")
@click.option("--slow-ms", type=click.FloatRange(min=0), default=1000.0, show_default=True,
              help="Report exchanges slower than this, beyond what the request lets the broker wait.")
@click.option("--storm-rebalances", type=click.IntRange(min=1), default=5, show_default=True,
              help="Report a rebalance storm above this many group generations per minute.")
@click.option("--list-rules", is_flag=True, help="List the rules and exit.")
@jobs_option
@filter_option
@capture_options
def check_command(captures: tuple[str, ...], rules: tuple[str, ...], skip_rules: tuple[str, ...], fmt: str,
                  timeline_group: str | None, slow_ms: float, storm_rebalances: int, list_rules: bool,
                  jobs: int, display_filter: Any, **kw: Any) -> int:
    """Find client and broker bugs: unanswered requests, error codes, version misuse,
    producer sequence gaps, fetch-session and SASL misuse, rebalance storms...

    Each finding has a severity, a one-line explanation, what to do about it where that
    is clear, the connection, the frame numbers (as Wireshark counts them) and the
    exchanges involved. Exit status 0 when
    no finding is an error, 1 otherwise, so it can gate a CI job. With --timeline the
    exit status is 0 when the group was seen, 1 when not.
    """
    if list_rules:
        _print_rules(fmt)
        return 0
    if not captures:
        raise click.UsageError("missing argument 'CAPTURES...'")
    chosen = set(rules) if rules else set(RULES)
    chosen -= set(skip_rules)

    from analyzer.shards import auto_jobs, run_check_sharded

    results: list[dict[str, Any]] = []
    many = len(captures) > 1
    decode = lean_decode(kw["max_depth"], Decode.LITE_CHECK)
    args: dict[str, Any] = {"rules": chosen, "slow_ms": slow_ms, "storm_rebalances": storm_rebalances}
    # (the worker processes check every exchange: a filtered run reads each capture in one)
    workers = 1 if display_filter is not None else (jobs or auto_jobs(captures))
    for path, run in iter_captures(captures, kw, progress=True, decode=decode):
        checker = None
        if workers > 1 and os.path.isfile(path):
            res = run_check_sharded(path, run.pipeline.options, run.ctx, args, workers, progress=run.progress)
            if res.exact:
                checker, last_ts, warning = res.checker, res.last_ts, res.capture_warning
            # (else a topic id learnt on other connections than those that use it: one process
            # names it as one process does)
        if checker is None:
            checker = Checker(**args)
            keep = display_filter.matcher(run.ctx) if display_filter is not None else None
            for ex in run:
                if keep is not None and not keep(ex):
                    continue
                checker.add(ex)
            last_ts, warning = run.summary.last_ts, run.summary.capture_warning
            checker.encrypted(run.summary)
        findings = checker.finish(capture_end=last_ts)
        warn_damaged(path, warning)
        if many:
            for f in findings:
                f.capture = path
        results.append({"capture": path, "checker": checker, "findings": findings})

    if timeline_group is not None:
        return _timeline(results, timeline_group, fmt)
    all_findings = [f for r in results for f in r["findings"]]
    if fmt == "json":
        _write_json(sys.stdout, results, count_by_severity(all_findings), sorted(chosen))
    else:
        _print_text(results)
    return 1 if any(f.severity == "error" for f in all_findings) else 0


# -- JSON output -------------------------------------------------------------------

def _json(v: Any, level: int) -> str:
    """``v`` as ``json.dumps(indent=1)`` writes it at nesting ``level`` (its lines after the
    first indented by the level: JSON strings hold no raw newline)."""
    text = json.dumps(v, indent=1, default=str)
    return text.replace("\n", "\n" + " " * level) if level else text


def _write_json(out: Any, results: list[dict[str, Any]], counts: dict[str, int], rules: list[str]) -> None:
    """The findings document, ``json.dumps(doc, indent=1)`` byte for byte, written a finding
    at a time (a capture of many connections has many findings: none is held as text)."""
    w = out.write
    w('{\n "captures": [')
    for i, r in enumerate(results):
        checker: Checker = r["checker"]
        fs: list[Finding] = r["findings"]
        w(",\n  {" if i else "\n  {")
        for key, v in (("capture", r["capture"]), ("exchanges", checker.exchanges), ("checker", checker.stats()),
                       ("counts", count_by_severity(fs))):
            w(f"\n   {json.dumps(key)}: {_json(v, 3)},")
        w('\n   "findings": [')
        for j, f in enumerate(fs):
            w((",\n    " if j else "\n    ") + _json(dict(f.to_json(), show=show_command(r["capture"], f)), 4))
        w("\n   ]\n  }" if fs else "]\n  }")
    w("\n ],\n" if results else "],\n")
    w(f' "counts": {_json(counts, 1)},\n "rules": {_json(rules, 1)}\n}}\n')


# -- text output -------------------------------------------------------------------

def _frames_text(f: Finding) -> str:
    shown = ", ".join(map(str, f.frames[:12]))
    more = len(f.frames) - 12
    total = f.details.get("count")
    if more > 0:
        shown += f", ... ({len(f.frames)} listed)"
    if isinstance(total, int) and total > len(f.frames) and len(f.frames) >= 50:
        shown += f" of {total}"
    return shown or "-"


def show_command(capture: str, f: Finding) -> str | None:
    """The ``read`` command that shows a finding's exchanges (None: the finding names no
    frame); a story told once for several connections shows every occurrence's."""
    from analyzer.sinks.output import read_command

    told = f.occurrences or [f]
    frames = [fr for o in told for fr in o.frames]
    return read_command(capture, frames, [e for o in told for e in o.exchanges]) if frames else None


def _print_text(results: list[dict[str, Any]]) -> None:
    from rich.markup import escape

    con = stdout_console(highlight=False, soft_wrap=True)
    for r in results:
        fs: list[Finding] = r["findings"]
        c = count_by_severity(fs)
        head = ", ".join(f"{c[s]} {s}{'s' if c[s] != 1 and s != 'info' else ''}" for s in SEVERITIES)
        con.print(f"[bold]== {escape(os.path.basename(r['capture']))}[/bold]: {head} "
                  f"({r['checker'].exchanges} exchanges)")
        for sev in SEVERITIES:
            group = [f for f in fs if f.severity == sev]
            if not group:
                continue
            con.print(f"[{SEVERITY_STYLE[sev]}]{sev.upper()} ({len(group)})[/{SEVERITY_STYLE[sev]}]")
            for f in group:
                con.print(f"  [{SEVERITY_STYLE[sev]}]{escape(f.rule)}[/{SEVERITY_STYLE[sev]}]  {escape(f.message)}")
                if f.advice:
                    con.print(f"      what to do: {escape(f.advice)}")
                con.print(f"      conn {escape(f.conn)}  frames {_frames_text(f)}", style="dim")
                show = show_command(r["capture"], f)
                if show:
                    con.print(f"      show: {escape(show)}", style="dim")
        if not fs:
            con.print("  no findings")


def _print_rules(fmt: str) -> None:
    if fmt == "json":
        sys.stdout.write(json.dumps([r._asdict() for r in RULES.values()], indent=1) + "\n")
        return
    from rich.markup import escape

    con = stdout_console(highlight=False, soft_wrap=True)
    width = max(len(r) for r in RULES)
    for r in RULES.values():
        con.print(f"{r.id:<{width}}  [{SEVERITY_STYLE[r.severity]}]{r.severity:<7}[/{SEVERITY_STYLE[r.severity]}]  "
                  f"{r.scope:<10}  {escape(r.summary)}")


# -- --timeline ----------------------------------------------------------------------

def _timeline(results: list[dict[str, Any]], group: str, fmt: str) -> int:
    events: list[dict[str, Any]] = []
    known: set[str] = set()
    for r in results:
        checker: Checker = r["checker"]
        known.update(checker.groups())
        for e in checker.timeline(group):
            if len(results) > 1:
                e = dict(e, capture=r["capture"])
            events.append(e)
    from analyzer.sinks.insights import group_stories

    stories = group_stories(events)
    story = stories[0] if stories else None
    if fmt == "json":
        sys.stdout.write(json.dumps({"group_id": group, "story": story, "events": events}, indent=1,
                                    default=str) + "\n")
    else:
        _print_timeline(group, events, story)
    if not events:
        hint = f"groups seen: {', '.join(sorted(known))}" if known else "no group traffic in the capture"
        click.echo(f"kafkawire-sniff: error: group {group!r} not found ({hint})", err=True)
        return 1
    return 0


def _print_timeline(group: str, events: list[dict[str, Any]], story: dict[str, Any] | None = None) -> None:
    from rich.markup import escape

    con = stdout_console(highlight=False, soft_wrap=True)
    con.print(f"[bold]group {escape(group)}[/bold]: {len(events)} exchanges")
    t0 = events[0]["time"] if events else 0.0
    for line in story_lines(story, t0):
        con.print(escape(line))
    for e in events:
        frames = f"#{e['request_frame']}" + (f"->#{e['response_frame']}" if e.get("response_frame") else "")
        parts = [f"{'+' + format(e['time'] - t0, '.3f') + 's':>10}", f"{frames:<13}", f"{e['api_name']} v{e['api_version']}"]
        member = e.get("assigned_member_id") or e.get("member_id")
        if member:
            parts.append(f"member={member}")
        if e.get("generation_id") is not None:
            parts.append(("epoch=" if e["api_name"] == "ConsumerGroupHeartbeat" else "gen=")
                         + str(e["generation_id"]))
        for k in ("leader", "protocol_name"):
            if e.get(k):
                parts.append(f"{k}={e[k]}")
        if e.get("members"):
            parts.append(f"members={','.join(map(str, e['members']))}")
        if e.get("assignments"):
            parts.append("plan=" + "; ".join(f"{m}:{_asg(a)}" for m, a in e["assignments"].items()))
        if e.get("assignment"):
            parts.append(f"assigned={_asg(e['assignment'])}")
        if e.get("offsets"):
            parts.append("offsets=" + ",".join(f"{k}@{v}" for k, v in e["offsets"].items()))
        line = escape("  ".join(parts))
        if e.get("error"):
            line += f"  [bold red]{escape(str(e['error']))}[/bold red]"
        con.print(line + f"  [dim]{escape(e['conn'])}[/dim]")


def _asg(a: dict[str, list[int]] | None) -> str:
    if not a:
        return "-"
    return " ".join(f"{t}[{','.join(map(str, ps))}]" for t, ps in a.items())


def story_lines(story: dict[str, Any] | None, t0: float) -> list[str]:
    """A group's story (analyzer.sinks.insights.group_stories) in a few lines: each generation with
    its members, protocol and leader, its rebalance and what started it; rejoins that did not
    move the generation; KIP-848 members with their epochs."""
    if not story:
        return []
    out = []
    for g in story["generations"]:
        took = f"rebalance {g['rebalance_ms']:.0f} ms" if g["rebalance_ms"] is not None else "rebalance not seen whole"
        start = f" from +{g['rebalance_start'] - t0:.3f}s" if g["rebalance_start"] is not None else ""
        out.append(f"  generation {g['generation']}: {len(g['members'])} member(s) "
                   f"({', '.join(map(str, g['members']))}), protocol {g['protocol'] or '-'}, "
                   f"leader {g['leader'] or '-'}; {took}{start}; started by {'; '.join(g['triggers']) or '-'}")
    if story["rejoins_same_generation"]:
        out.append(f"  {story['rejoins_same_generation']} JoinGroup(s) by members that got back the generation "
                   "they had (rejoining without the generation moving)")
    for m in story["members_kip848"]:
        out.append(f"  member {m['member_id']} (KIP-848): epochs {m['first_epoch']} to {m['last_epoch']}, "
                   f"{m['assignments']} assignment(s), last {_asg(m['assignment'])}")
    return out
