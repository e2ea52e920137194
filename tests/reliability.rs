//! Reliability: host-script regressions found by fuzzing, crash consistency (SIGKILL of a
//! writer process), concurrency, storage faults. See docs/reliability.md.

mod support {
    pub mod host_script;
}

use support::host_script::run_script;

/// A few fixed scripts through the same driver the fuzz target uses.
#[test]
fn host_script_smoke() {
    for seed in 0u64..16 {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let data: Vec<u8> = (0..400)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        if let Err(e) = run_script(&data) {
            panic!("seed {seed}: {e}");
        }
    }
}

/// Reloads a session from its stored records.
fn reload(session: &llmsession::Session) -> llmsession::Result<llmsession::Session> {
    use llmsession::store::MemoryStore;
    let records = support::host_script::records_of(session).into_iter().map(|r| String::from_utf8(r).unwrap()).collect();
    let store = MemoryStore::with_records(records);
    llmsession::Session::open(Box::new(store), llmsession::SessionOptions::default()).map(|(s, _)| s)
}

/// Finding 1 (host_script fuzzing): a fork seeded with no events, or only with events an
/// earlier ancestor wrote, got a header whose lineage did not end with the parent, and the
/// fork could not be loaded again ("lineage: the last ancestor must be the parent").
#[test]
fn fork_with_empty_or_inherited_seed_reloads() {
    use llmsession::store::MemoryStore;
    use llmsession::{Session, SessionOptions};
    let root = Session::in_memory();
    root.append(llmsession::NewEvent::new("host/note", serde_json::json!({"n": 1}))).unwrap();
    root.append(llmsession::NewEvent::new("host/note", serde_json::json!({"n": 2}))).unwrap();
    // An empty seed.
    let empty = root.fork(Some(0), Box::new(MemoryStore::new()), SessionOptions::default()).unwrap();
    let again = reload(&empty).expect("a fork with an empty seed reloads");
    assert_eq!(again.header_record().parent, Some((root.id(), 0)));
    // A fork of a fork whose seed lies within the grandparent's events.
    let child = root.fork(None, Box::new(MemoryStore::new()), SessionOptions::default()).unwrap();
    child.append(llmsession::NewEvent::new("host/note", serde_json::json!({"n": 3}))).unwrap();
    let grandchild = child.fork(Some(1), Box::new(MemoryStore::new()), SessionOptions::default()).unwrap();
    let again = reload(&grandchild).expect("a fork seeded from inherited events reloads");
    let h = again.header_record();
    assert_eq!(h.parent, Some((child.id(), 1)));
    assert_eq!(h.lineage.last().map(|a| (a.id.clone(), a.seed_length)), Some((child.id(), 1)));
    assert_eq!(h.session_id_at(0), root.id(), "the seeded event still names the session that wrote it");
}

/// Finding 6 (load_log fuzzing): serde_json's default float parser is not correctly rounded.
/// A number in a carried-through field (here a 68-digit integer, read as a float) was rounded
/// once on load and differently again on the next load, so the stored bytes drifted on every
/// reload (`2.333333333333333e+67`, then `2.3333333333333333e+67`); a float in a call config
/// could likewise rebuild a request differently after a reload.
#[test]
fn numbers_survive_reloads_byte_for_byte() {
    use llmsession::store::MemoryStore;
    let big = "23333333333333333333333333333333333333333333333333333333333333333338";
    let header = format!(r#"{{"createdAt":1,"format":"llmsession","id":"s","note":{big},"type":"session","version":1}}"#);
    let store = MemoryStore::with_records(vec![header]);
    let (s, _) = llmsession::Session::open(Box::new(store), llmsession::SessionOptions::default()).unwrap();
    let first = s.header_record().to_value().to_string();
    let again = reload(&s).unwrap();
    assert_eq!(again.header_record().to_value().to_string(), first, "a reload changed the header's bytes");
    let v: serde_json::Value = serde_json::from_str(big).unwrap();
    let back: serde_json::Value = serde_json::from_str(&v.to_string()).unwrap();
    assert_eq!(back.to_string(), v.to_string());
}
