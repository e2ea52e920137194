"""Stores named by URL: ``file:`` always; PostgreSQL when LLMSESSION_PG_URL names a server
(``make test-pg`` starts a throwaway one; without it those tests are skipped, saying so)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote

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


def test_checkpoints_reopen_and_a_directory_lists_its_logs(tmp_path: Path) -> None:
    note = {"type": "host/note", "data": {"n": 1}}
    path = tmp_path / "s.jsonl"
    with lls.Session.open_file(path, {"id": "cp", "checkpoints": {"everyEvents": 3}}) as s:
        for _ in range(10):
            s.append(note)
        events = s.events()
        assert sum(e["type"] == "session/checkpoint" for e in events) == 3
        with pytest.raises(lls.InvalidInputError):
            s.append({"type": "session/checkpoint", "data": {}})
    for check in ("bounded", "full"):
        with lls.Session.open_file(path, {"check": check}) as r:
            assert r.events() == events
            r.verify()
    with pytest.raises(lls.InvalidInputError):
        lls.Session.open_file(path, {"check": "sideways"})
    with lls.Session.memory({"checkpoints": False}) as off:
        for _ in range(1100):
            off.append(note)
        assert not any(e["type"] == "session/checkpoint" for e in off.events())
    with lls.Session.open_file(tmp_path / "t.jsonl", {"id": "another"}):
        listed = lls.list_sessions(f"file:{tmp_path}")
        assert [(x["id"], x["events"], x["inUse"]) for x in listed] == [("another", 0, True), ("cp", 13, False)]


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


def _pg_with(base: str, params: str) -> str:
    """``base`` with more URL query parameters."""
    return f"{base}{'&' if '?' in base else '?'}{params}"


def _said(text: str) -> dict:
    """A user message event saying ``text``."""
    return {**NOTE, "data": {**NOTE["data"], "message": {"role": "user", "content": [{"type": "text", "text": text}]}}}


def _psql(sql: str) -> str:
    """Runs one statement on the test server with the server's psql (LLMSESSION_PG_BIN,
    /usr/lib/postgresql/*/bin, or PATH, as scripts/pg/server.sh finds the server's binaries)."""
    candidates = []
    if os.environ.get("LLMSESSION_PG_BIN"):
        candidates.append(os.path.join(os.environ["LLMSESSION_PG_BIN"], "psql"))
    candidates += sorted(glob.glob("/usr/lib/postgresql/*/bin/psql"), reverse=True)
    candidates.append(shutil.which("psql") or "")
    psql = next((c for c in candidates if c and os.path.isfile(c)), None)
    assert psql, "psql not found (LLMSESSION_PG_BIN, /usr/lib/postgresql/*/bin, PATH): it comes with the server binaries"
    assert PG is not None
    out = subprocess.run(
        [psql, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-d", PG, "-c", sql],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, f"psql {sql!r}: {out.stderr}"
    return out.stdout


@needs_pg
def test_postgres_pooled_writers_share_a_bounded_pool() -> None:
    """Six writers of six sessions over one pool of two connections (pool_size=2), appending
    from six threads at once; pool_size=0 is refused."""
    assert PG is not None
    url = _pg_with(PG, "pool_size=2&pool_timeout=20")
    prefix = f"py-pool-{uuid.uuid4().hex}"
    ids = [f"{prefix}-{i}" for i in range(6)]
    writers = [lls.Session.open_url(url, {"id": sid}) for sid in ids]
    try:
        def write(i: int) -> None:
            for j in range(5):
                writers[i].append(_said(f"writer {i}, event {j}"))

        with ThreadPoolExecutor(max_workers=6) as pool:
            for f in [pool.submit(write, i) for i in range(6)]:
                f.result()
        assert [w.stats()["events"] for w in writers] == [5] * 6
    finally:
        for w in writers:
            w.close()
    for sid in ids:
        with lls.Session.open_url(PG, {"id": sid, "readOnly": True}) as r:
            assert r.verify()["events"] == 5
    with pytest.raises(lls.InvalidInputError, match="pool_size"):
        lls.Session.open_url(_pg_with(PG, "pool_size=0"), {"id": f"{prefix}-none"})


@needs_pg
@pytest.mark.skipif(not os.environ.get("LLMSESSION_PG_CA"), reason="LLMSESSION_PG_CA is not set (scripts/pg/server.sh run sets it when the server has TLS)")
def test_postgres_tls_verify_full() -> None:
    """verify-full against the CA that signed the server's certificate opens and appends; an
    unrelated CA is a StorageError about the certificate; verify-full without a CA is invalid."""
    assert PG is not None
    ca = os.environ["LLMSESSION_PG_CA"]
    sid = f"py-tls-{uuid.uuid4().hex}"
    with lls.Session.open_url(_pg_with(PG, f"sslmode=verify-full&sslrootcert={quote(ca, safe='/')}"), {"id": sid}) as s:
        s.append(NOTE)
        assert s.stats()["events"] == 1
    other = os.environ.get("LLMSESSION_PG_OTHER_CA")
    if other:
        with pytest.raises(lls.StorageError, match="(?i)certificate"):
            lls.Session.open_url(_pg_with(PG, f"sslmode=verify-full&connect_timeout=5&sslrootcert={quote(other, safe='/')}"), {"id": sid})
    with pytest.raises(lls.InvalidInputError, match="sslrootcert"):
        lls.Session.open_url(_pg_with(PG, "sslmode=verify-full"), {"id": sid})


@needs_pg
def test_postgres_locked_after_a_lost_lease() -> None:
    """A writer whose lease was taken over (expired from outside with SQL, then taken by a writer
    of another pool) gets LockedError naming its fencing token on its next append and on every
    one after; the new writer's log holds none of the refused events."""
    assert PG is not None
    # A long lease: the renewer (every third of it) does not renew A's lease between the expiry
    # and B's open.
    url = _pg_with(PG, "lease_time=60")
    sid = f"py-takeover-{uuid.uuid4().hex}"
    a = lls.Session.open_url(url, {"id": sid})
    try:
        a.append(_said("A, before the takeover"))
        out = _psql(
            "UPDATE llmsession_sessions SET lease_expires = now() - interval '1 second', lease_live = NULL "
            f"WHERE id = '{sid}' RETURNING id"
        )
        assert out.strip() == sid, f"the expiry matched no row: {out!r}"
        # Another pool (another URL), as another process would have.
        with lls.Session.open_url(url + "&pool_size=3", {"id": sid, "create": False}) as b:
            b.append(_said("B, after the takeover"))
            with pytest.raises(lls.LockedError) as first:
                a.append(_said("A, refused 1"))
            epoch = first.value.detail.get("epoch")
            assert isinstance(epoch, int) and epoch >= 1, first.value.detail
            current = first.value.detail.get("currentEpoch")
            assert current is None or current > epoch, first.value.detail
            with pytest.raises(lls.LockedError) as second:
                a.append(_said("A, refused 2"))
            assert second.value.detail.get("epoch") == epoch
            b.append(_said("B, still writing"))
    finally:
        a.close()
    with lls.Session.open_url(PG, {"id": sid, "readOnly": True}) as r:
        assert r.verify()["events"] == 3
        log = r.export_jsonl()
    for want in ("A, before the takeover", "B, after the takeover", "B, still writing"):
        assert want in log
    assert "A, refused" not in log
