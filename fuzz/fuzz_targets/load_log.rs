//! Loading a JSONL log: the input is the file's bytes. Loading must never panic; when it
//! succeeds the session must reopen from what was kept (the cut tail and repairs included)
//! to the same events, and a second load must change nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use llmsession::log::load::load_records;
use llmsession::store::{MemoryStore, StoreContents};
use llmsession::{Session, SessionOptions};

fn split(data: &[u8]) -> StoreContents {
    let mut records: Vec<Vec<u8>> = data.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    let last_complete = data.last() == Some(&b'\n') || data.is_empty();
    if last_complete {
        records.pop();
    }
    StoreContents { records, last_complete }
}

fn lines(s: &Session) -> Vec<String> {
    s.records().expect("an in-memory store reads its records").iter().map(|x| x.to_string()).collect()
}

fuzz_target!(|data: &[u8]| {
    let contents = split(data);
    let loaded = load_records(&contents);
    // Through a store holding the same records, as a host opening the file would.
    let Ok(texts) = contents.records.iter().map(|r| std::str::from_utf8(r)).collect::<Result<Vec<&str>, _>>() else { return };
    let store = MemoryStore::with_records(texts.iter().map(|t| t.to_string()).collect());
    let opened = Session::open(Box::new(store), SessionOptions::default());
    match (&loaded, &opened) {
        (Ok(l), o) => {
            assert!(l.keep_records <= contents.records.len(), "kept more records than stored");
            if contents.last_complete {
                if let Err(e) = o {
                    panic!("load_records accepted what Session::open rejected: {e}");
                }
            }
        }
        // MemoryStore has no torn flag: only a complete last record must load the same.
        (Err(_), Ok(_)) if contents.last_complete && !contents.records.is_empty() => {
            panic!("load_records rejected what Session::open accepted")
        }
        _ => {}
    }
    let Ok((session, _)) = opened else { return };
    let first = lines(&session);
    // Reopen what was kept: same events, nothing more to repair.
    let again = MemoryStore::with_records(first.clone());
    let (reopened, report) = Session::open(Box::new(again), SessionOptions::default()).expect("a kept log reopens");
    assert_eq!(report.repaired_events, 0, "a repaired log needed repair again");
    assert_eq!(lines(&reopened), first, "reopening changed the log");
});
