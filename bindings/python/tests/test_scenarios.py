"""Every scenario file (tests/scenarios/*.json and $LLMSESSION_SCENARIOS) through the Python
driver, with callbacks answering at once and through pending replies; each run's transcript is
compared with the scenario's golden file (golden.py)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import List

import pytest

import golden
import llmsession as lls
from scenario_driver import REPO, run_file


def scenario_files() -> List[Path]:
    one = os.environ.get("LLMSESSION_SCENARIO_FILE")
    if one:  # a path from here or from the repository root
        return [Path(one).resolve() if Path(one).exists() else (REPO / one).resolve()]
    dirs = [REPO / "tests" / "scenarios"]
    if os.environ.get("LLMSESSION_SCENARIOS"):
        dirs.append(Path(os.environ["LLMSESSION_SCENARIOS"]).resolve())
    return [f for d in dirs for f in sorted(d.glob("*.json"))]


FILES = scenario_files()


def test_there_are_scenario_files() -> None:
    assert len(FILES) >= (1 if os.environ.get("LLMSESSION_SCENARIO_FILE") else 40)


def test_golden_comparison_names_the_first_difference_and_masks() -> None:
    want = golden.expand(json.loads(golden.golden_path(FILES[0]).read_text()))
    got = copy.deepcopy(want)
    assert golden.first_difference(want, got) is None
    got["final"]["events"][0]["seq"] += 1
    got["ops"][0]["events"] += 1
    d = golden.first_difference(want, got)
    assert d is not None and d[0] == "/final/events/0/seq" and d[2] == want["final"]["events"][0]["seq"] + 1
    assert golden.first_difference({"a": True}, {"a": 1}) == ("/a", True, 1)
    m = golden.mask_strings({"a": ["/x/d/load-1.jsonl.cut-1712345678901"], "b": "summariser callback: host callback failed: no"}, "/x/d")
    assert m == {"a": ["<dir>/load-1.jsonl.cut-<time>"], "b": "no"}
    r = golden.masked_record({"seq": 1, "time": "t", "chain": "c", "data": {"time": "kept"}})
    assert r == {"seq": 1, "time": "<time>", "chain": "<chain>", "data": {"time": "kept"}}


@pytest.mark.parametrize("mode", ["sync", "pending"])
@pytest.mark.parametrize("file", FILES, ids=[f.name for f in FILES])
def test_scenario(file: Path, mode: str) -> None:
    run_file(file, mode)


def test_scenarios_leave_no_live_handles() -> None:
    run_file(FILES[0], "pending")
    assert lls.live_handle_count() == 0
    assert lls.registered_callback_count() == 0
