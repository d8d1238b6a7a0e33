"""Consumer groups: each group's events (the timeline and the story of ``check --timeline``),
and the rule on rebalance storms, judged over every connection when the run ends."""
from __future__ import annotations

import bisect
from typing import Any

from analyzer.model import Exchange
from analyzer.sinks.insights import group_event, group_stories, rejoins_same_generation

from .common import JOIN_GROUP, MAX_LIST, SYNC_GROUP, ConnState, Finding, Kept, Settings, Unit, ref_of

MAX_GROUP_EVENTS = 200_000  # group timeline events kept in all
OFFSET_COMMIT = 8
# JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit, ConsumerGroupHeartbeat
GROUP_APIS = frozenset({JOIN_GROUP, SYNC_GROUP, 12, 13, OFFSET_COMMIT, 68})


class Groups(Unit):
    """The group APIs' exchanges as events (kept whatever the rules: the timeline reads
    them); more than --storm-rebalances generations within the storm window, or as many
    JoinGroups answered with the generation the member had."""
    ids = ("rebalance-storm",)
    apis = GROUP_APIS
    always = True

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.events: Kept[dict[str, Any]] = Kept(MAX_GROUP_EVENTS)

    def add(self, ex: Exchange, cs: ConnState) -> None:
        if not self.events.room():
            return
        # (the timeline's offsets are OffsetCommit's: the other group APIs' events are whole
        # in lean trees, and JoinGroup and SyncGroup have full ones)
        ev = group_event(ex, cs.name, full=ex.api_key == OFFSET_COMMIT)
        if ev is not None:
            self.events.append(ev)

    def merge(self, other: Groups) -> None:
        self.events.merge(other.events)

    def stats(self) -> dict[str, int]:
        return {"group_events": len(self.events), "group_events_dropped": self.events.dropped}

    def groups(self) -> list[str]:
        return sorted({e["group_id"] for e in self.events if e.get("group_id") is not None})

    def timeline(self, group_id: str) -> list[dict[str, Any]]:
        evs = [e for e in self.events if e.get("group_id") == group_id]
        evs.sort(key=lambda e: (e["time"], e["request_frame"] or 0))
        return evs

    def stories(self) -> list[dict[str, Any]]:
        return group_stories(self.events)

    def finish(self) -> list[Finding]:
        if "rebalance-storm" not in self.on:
            return []
        out: list[Finding] = []
        by_group: dict[str, dict[int, dict[str, Any]]] = {}
        joins: dict[str, list[dict[str, Any]]] = {}
        for e in sorted(self.events, key=lambda e: (e["time"], e["request_frame"] or 0, e["conn"])):
            if e.get("group_id") is None:
                continue
            if e["api_name"] == "JoinGroup":
                joins.setdefault(e["group_id"], []).append(e)
            gen = e.get("generation_id")
            if e["api_name"] not in ("JoinGroup", "ConsumerGroupHeartbeat") or e.get("error") or gen is None \
                    or gen < 0:
                continue
            gens = by_group.setdefault(e["group_id"], {})
            if gen not in gens or e["time"] < gens[gen]["time"]:
                gens[gen] = e
        window = self.settings.storm_window_s
        most = self.settings.storm_rebalances
        for group, gens in by_group.items():
            evs = sorted(gens.values(), key=lambda e: e["time"])
            sel = self._densest(evs)
            if len(sel) > most:
                out.append(self._storm(group, sel, f"group {group}: {len(sel)} generations within {window:g} s "
                                                   f"(generation {sel[0]['generation_id']} to "
                                                   f"{sel[-1]['generation_id']})",
                                       {"generations": len(sel), "total_generations": len(evs)}))
        for group, js in joins.items():
            sel = self._densest(rejoins_same_generation(js))
            if len(sel) > most:
                out.append(self._storm(group, sel, f"group {group}: {len(sel)} JoinGroups within {window:g} s by "
                                                   "members that got back the generation they had "
                                                   f"({sel[0]['generation_id']}): rejoining without the "
                                                   "generation moving",
                                       {"rejoins": len(sel), "kind": "rejoin"}))
        return out

    def _densest(self, evs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The most events (in time order) within one storm window."""
        times = [e["time"] for e in evs]
        worst, worst_i = 0, 0
        for i, t in enumerate(times):
            j = bisect.bisect_right(times, t + self.settings.storm_window_s)
            if j - i > worst:
                worst, worst_i = j - i, i
        return evs[worst_i:worst_i + worst]

    def _storm(self, group: str, sel: list[dict[str, Any]], message: str, details: dict[str, Any]) -> Finding:
        conns = sorted({e["conn"] for e in sel})
        return Finding(
            "rebalance-storm", "warning", message, ", ".join(conns),
            sorted(e["request_frame"] for e in sel if e["request_frame"])[:MAX_LIST],
            [ref_of(e) for e in sel][:MAX_LIST],
            {"group_id": group, "window_s": self.settings.storm_window_s, **details},
            advice=f"read what starts the rebalances with --timeline {group}: members that time out "
                   "(raise session.timeout.ms or max.poll.interval.ms, or make the poll loop faster) or that "
                   "restart again and again")
