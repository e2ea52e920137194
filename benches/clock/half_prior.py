#!/usr/bin/env python3
"""A return-time prior made from some of the extra transcripts, for judging the clock out of sample
(docs/performance.md, "On 154 more real sessions").

    half_prior.py PREPARED_DIR GROUP[,GROUP...] [KEEP_WARM_TIERS]

PREPARED_DIR is what benches/clock/prepare.py wrote (OUT/extra/claude-code, files named
GROUP__...); the groups are the first components of those names. Prints `simulate --options`
JSON whose `returnModel` is the gaps between consecutive requests of those groups' transcripts
(a request: an assistant line with usage, once per request id; a sub-agent's requests apart) and
their session ends as never returning, counting as 100 gaps against the session's own (`learn`:
true), unbinned; with KEEP_WARM_TIERS `false`, also `"keepWarmTiers": false`. Then:

    llmsession simulate --from claude-code OTHER_GROUPS_FILES... --prices P --options THAT --json
"""
import glob
import json
import os
import sys
from datetime import datetime


def millis(stamp):
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def gaps_of(path):
    """The gaps (ms) between consecutive requests of one transcript, and how many timelines it has."""
    first = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            msg = obj.get("message")
            if obj.get("type") != "assistant" or not isinstance(msg, dict) or "usage" not in msg:
                continue
            key = (bool(obj.get("isSidechain")), obj.get("requestId") or msg.get("id"))
            if obj.get("timestamp") and key not in first:
                first[key] = millis(obj["timestamp"])
    gaps, timelines = [], 0
    for side in (False, True):
        times = sorted(t for (s, _), t in first.items() if s == side)
        if times:
            timelines += 1
            gaps += [b - a for a, b in zip(times, times[1:]) if b > a]
    return gaps, timelines


def main(prepared, groups, tiers=None):
    gaps, ends = [], 0
    for group in groups.split(","):
        for path in sorted(glob.glob(os.path.join(prepared, f"{group}__*.jsonl"))):
            g, n = gaps_of(path)
            gaps += g
            ends += n
    if not gaps:
        sys.exit(f"half_prior: no requests in {prepared} for {groups}")
    options = {"returnModel": {"gapsMs": gaps, "neverReturns": ends / (ends + len(gaps)), "learn": True, "priorWeight": 100}}
    if tiers is not None:
        options["keepWarmTiers"] = tiers == "true"
    print(json.dumps(options))
    print(f"half_prior: {len(gaps)} gaps and {ends} ends from {groups}", file=sys.stderr)


if __name__ == "__main__":
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    main(*sys.argv[1:])
