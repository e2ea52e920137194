"""Stores named by URL: ``file:`` always; PostgreSQL when LLMSESSION_PG_URL names a server
(``make test-pg`` starts a throwaway one; without it those tests are skipped, saying so)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import llmsession as lls

PG = os.environ.get("LLMSESSION_PG_URL")
needs_pg = pytest.mark.skipif(not PG, reason="LLMSESSION_PG_URL is not set; `make test-pg` starts a throwaway PostgreSQL server")
NOTE = {"type": "user/message", "data": {"message": {"role": "user", "content": [{"type": "text", "text": "kept"}]}, "source": "host"}, "surfaceOp": "append"}


def test_a_file_url_opens_lists_and_locks(tmp_path: Path) -> None:
    url = f"file:{tmp_path / 'u.jsonl'}"
    with lls.Session.open_url(url, {"id": "by-url"}) as s:
        s.append(NOTE)
        with pytest.raises(lls.LockedError):
            lls.Session.open_url(url)
        listed = lls.list_sessions(url)
        assert [x["id"] for x in listed] == ["by-url"] and listed[0]["events"] == 1 and listed[0]["inUse"] is True
    with pytest.raises(lls.InvalidInputError):
        lls.Session.open_url("nope://x")
    with pytest.raises(lls.InvalidArgumentError):
        lls.list_sessions("")


@needs_pg
def test_postgres_one_writer_readers_and_fork() -> None:
    assert PG is not None
    sid = f"py-{uuid.uuid4().hex}"
    with lls.Session.open_url(PG, {"id": sid}) as w:
        w.append(NOTE)
        with pytest.raises(lls.LockedError) as e:
            lls.Session.open_url(PG, {"id": sid})
        assert "llmsession pid" in str(e.value.detail.get("holder"))
        with lls.Session.open_url(PG, {"id": sid, "readOnly": True}) as r:
            with pytest.raises(lls.ReadOnlyError):
                r.append(NOTE)
            assert r.stats()["events"] == 1
        with w.fork({"url": PG, "id": f"{sid}-fork"}) as f:
            assert f.info()["parent"]["id"] == sid
    page = lls.list_sessions(PG, {"after": sid, "limit": 1})
    assert page[0]["id"] == f"{sid}-fork"
    with lls.Session.open_url(PG, {"id": sid, "create": False}) as again:
        assert again.verify()["events"] == 1
