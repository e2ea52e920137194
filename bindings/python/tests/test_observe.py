"""The observer hook: silent by default, observations to a callable or to logging, levels,
exceptions kept out of the library, observers freed once the library lets go of them."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

import llmsession as lls
from conftest import CONFIG


def torn_log(tmp_path: Path) -> Path:
    """A log with one turn whose last line was cut short by a crash."""
    log = tmp_path / "torn.jsonl"
    with lls.Session.open_file(log) as s, lls.Agent(s, CONFIG) as a:
        a.start_turn("Hi!")
    with open(log, "a", encoding="utf-8") as f:
        f.write('{"seq": 99, "type": "user/mess')
    return log


@pytest.fixture(autouse=True)
def no_observer() -> Any:
    lls.set_observer(None)
    yield
    lls.set_observer(None)


def test_nothing_is_reported_without_an_observer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with lls.Session.open_file(torn_log(tmp_path)) as s:
        assert s.load_report()["cutRecords"] == 1
    assert caplog.records == [] and lls.live_observer_count() == 0


def test_a_cut_tail_is_observed_with_its_fields(tmp_path: Path) -> None:
    seen: List[Dict[str, Any]] = []
    log = torn_log(tmp_path)
    with lls.observing(seen.append, "warn"):
        with lls.Session.open_file(log) as s:
            sid = s.id
    cuts = [o for o in seen if o["kind"] == "log-cut"]
    assert len(cuts) == 1, seen
    cut = cuts[0]
    assert cut["level"] == "warn" and cut["sessionId"] == sid and cut["records"] == 1 and cut["damaged"] is False
    assert cut["savedTo"].startswith(str(log) + ".cut-") and str(log) in cut["message"]
    assert lls.live_observer_count() == 0, "observing() restored no observer and the library let go of it"


def test_the_minimum_level_filters(tmp_path: Path) -> None:
    seen: List[Dict[str, Any]] = []
    lls.set_observer(seen.append, "error")
    with lls.Session.open_file(torn_log(tmp_path)):
        pass
    assert [o for o in seen if o["level"] != "error"] == []
    with pytest.raises(ValueError, match="unknown observer level 'loud'"):
        lls.set_observer(seen.append, "loud")


def test_log_to_makes_log_records_with_the_observation(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="llmsession")
    lls.log_to()
    with lls.Session.open_file(torn_log(tmp_path)):
        pass
    recs = [r for r in caplog.records if getattr(r, "llmsession", {}).get("kind") == "log-cut"]
    assert len(recs) == 1 and recs[0].levelno == logging.WARNING and recs[0].name == "llmsession"
    assert "cut 1 record" in recs[0].getMessage()


def test_an_observer_that_raises_is_logged_and_the_call_succeeds(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    def boom(_o: Dict[str, Any]) -> None:
        raise RuntimeError("observer bug")

    caplog.set_level(logging.ERROR, logger="llmsession")
    lls.set_observer(boom, "warn")
    with lls.Session.open_file(torn_log(tmp_path)) as s:
        assert s.load_report()["cutRecords"] == 1
    assert any("the observer raised" in r.getMessage() and "observer bug" in (r.exc_text or "") for r in caplog.records)


def test_observations_arrive_on_the_thread_that_caused_them(tmp_path: Path) -> None:
    threads: List[str] = []
    log = torn_log(tmp_path)
    lls.set_observer(lambda o: threads.append(threading.current_thread().name), "warn")

    def open_it() -> None:
        with lls.Session.open_file(log):
            pass

    t = threading.Thread(target=open_it, name="opener")
    t.start()
    t.join()
    assert threads == ["opener"]


def test_replacing_and_clearing_lets_go_of_every_observer() -> None:
    lls.set_observer(lambda o: None)
    lls.set_observer(lambda o: None, "debug")
    assert lls.live_observer_count() == 1
    lls.set_observer(None)
    assert lls.live_observer_count() == 0
