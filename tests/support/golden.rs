//! Golden transcripts of scenario runs (docs/scenarios.md, "Golden transcripts").
//!
//! While the runner plays a scenario it writes down what a user of the library could see: every
//! op's outcome (its error's kind, field and message when it failed), the request info of each
//! built request, the compaction outcome, the inputs every declarative fake received, and at the
//! end the whole log and the derived history, with wall-clock times and the chained digests
//! (which hash the times) replaced by fixed tokens. That document is compared with the checked-in
//! `golden/<stem>.json` next to the scenario file, or written there when
//! `LLMSESSION_SCENARIO_BLESS=1` is set. Every store variant of the runner goes through
//! [`settle`], so they all answer to the same files.

use llmsession::Error;
use serde_json::{json, Map, Value};
use std::path::{Path, PathBuf};

/// The version of the transcript format (the `transcript` key).
pub const FORMAT: u64 = 1;
/// What every wall-clock time is replaced by.
pub const TIME: &str = "<time>";
/// What every chained digest is replaced by (it hashes the record bytes, times included).
pub const CHAIN: &str = "<chain>";
/// What the runner's scratch directory (where `load` writes its logs) is replaced by.
pub const DIR: &str = "<dir>";

/// What the declarative fakes (listeners, pre-step listeners, summariser, token counter)
/// received since the previous op ended.
#[derive(Default)]
pub struct Journal {
    /// One entry per listener, pre-step or summariser call, in call order.
    pub calls: Vec<Value>,
    /// How many items the host token counter was asked to count.
    pub counter_calls: u64,
}

impl Journal {
    /// Moves what was recorded into the op's transcript entry (`calls`, `counterCalls`).
    pub fn drain_into(&mut self, entry: &mut Map<String, Value>) {
        if !self.calls.is_empty() {
            entry.insert("calls".into(), Value::Array(std::mem::take(&mut self.calls)));
        }
        if self.counter_calls > 0 {
            entry.insert("counterCalls".into(), self.counter_calls.into());
            self.counter_calls = 0;
        }
    }
}

/// Whether this run (re)writes the golden files instead of comparing with them.
pub fn blessing() -> bool {
    std::env::var("LLMSESSION_SCENARIO_BLESS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The golden file of a scenario file: `golden/<stem>.json` in the scenario's directory.
pub fn golden_path(scenario: &Path) -> PathBuf {
    let dir = scenario.parent().unwrap_or(Path::new("."));
    let stem = scenario.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    dir.join("golden").join(format!("{stem}.json"))
}

/// An op's error as the transcript records it: `{"kind", "field"?, "message"}`.
pub fn error_value(e: &Error) -> Value {
    let mut v = json!({"kind": e.kind().name(), "message": e.message()});
    if let Some(f) = e.detail().get("field").filter(|f| !f.is_null()) {
        v["field"] = f.clone();
    }
    v
}

/// A stored record (the session header or an event) with its times and chained digest masked.
pub fn masked_record(text: &str) -> Value {
    let mut v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("a stored record is not JSON ({e}): {text}"));
    if let Some(m) = v.as_object_mut() {
        for (key, token) in [("time", TIME), ("createdAt", TIME), ("chain", CHAIN)] {
            if let Some(x) = m.get_mut(key) {
                *x = token.into();
            }
        }
    }
    v
}

/// The final state: `{"session": header record, "events": [...], "history": [...]}`.
pub fn final_state(records: &[llmsession::log::Text], history_json: &str) -> Value {
    let (header, events) = records.split_first().expect("a log has a header record");
    json!({
        "session": masked_record(header),
        "events": events.iter().map(|r| masked_record(r)).collect::<Vec<_>>(),
        "history": serde_json::from_str::<Value>(history_json).expect("the history is JSON"),
    })
}

/// Masks, in every string of `v`, the scratch directory (`dir` becomes `<dir>`) and the time in
/// the name of a cut-off tail's sidecar (`.cut-<unix ms>` becomes `.cut-<time>`).
pub fn mask_strings(v: &mut Value, dir: &str) {
    match v {
        Value::String(s) => {
            let masked = mask_sidecar_time(&s.replace(dir, DIR));
            *s = masked;
        }
        Value::Array(a) => a.iter_mut().for_each(|x| mask_strings(x, dir)),
        Value::Object(m) => m.values_mut().for_each(|x| mask_strings(x, dir)),
        _ => {}
    }
}

fn mask_sidecar_time(s: &str) -> String {
    const MARK: &str = ".cut-";
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(MARK) {
        let after = &rest[at + MARK.len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        out.push_str(&rest[..at + MARK.len()]);
        if digits > 0 {
            out.push_str(TIME);
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

/// The scenario's `$repeat` expansions: each expanded string with the `{"$repeat", "times"}`
/// object it came from.
pub type Repeats = std::collections::HashMap<String, Value>;

/// Writes every string of `v` that is one of the scenario's `$repeat` expansions as the
/// `{"$repeat": text, "times": n}` object it was expanded from (so a golden file expanded the way
/// a scenario is expanded gives the transcript back, and large generated texts stay short).
pub fn fold_repeats(v: &mut Value, repeats: &Repeats) {
    match v {
        Value::String(s) => {
            if let Some(r) = repeats.get(s.as_str()) {
                *v = r.clone();
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| fold_repeats(x, repeats)),
        Value::Object(m) => m.values_mut().for_each(|x| fold_repeats(x, repeats)),
        _ => {}
    }
}

/// The first place where `got` differs from `want`, depth first, object keys in sorted order:
/// its JSON Pointer and the two values there (`None`: nothing there).
pub fn first_difference<'a>(want: &'a Value, got: &'a Value) -> Option<(String, Option<&'a Value>, Option<&'a Value>)> {
    fn walk<'a>(
        at: &mut String,
        want: Option<&'a Value>,
        got: Option<&'a Value>,
    ) -> Option<(String, Option<&'a Value>, Option<&'a Value>)> {
        match (want, got) {
            (Some(Value::Object(a)), Some(Value::Object(b))) => {
                let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
                keys.sort();
                keys.dedup();
                keys.into_iter().find_map(|k| {
                    let len = at.len();
                    at.push('/');
                    at.push_str(&k.replace('~', "~0").replace('/', "~1"));
                    let d = walk(at, a.get(k), b.get(k));
                    at.truncate(len);
                    d
                })
            }
            (Some(Value::Array(a)), Some(Value::Array(b))) => (0..a.len().max(b.len())).find_map(|i| {
                let len = at.len();
                at.push_str(&format!("/{i}"));
                let d = walk(at, a.get(i), b.get(i));
                at.truncate(len);
                d
            }),
            (w, g) if w == g => None,
            (w, g) => Some((at.clone(), w, g)),
        }
    }
    walk(&mut String::new(), Some(want), Some(got))
}

/// A value shortened for a report.
fn shown(v: Option<&Value>) -> String {
    let Some(v) = v else { return "(nothing)".into() };
    let s = v.to_string();
    match s.char_indices().nth(400) {
        None => s,
        Some((i, _)) => format!("{}… ({} characters)", &s[..i], s.chars().count()),
    }
}

/// Where a pointer into a transcript is, in words: `op 3 (request)`, `the final log`, ...
fn place(transcript: &Value, pointer: &str) -> String {
    let mut parts = pointer.split('/').skip(1);
    match (parts.next(), parts.next()) {
        (Some("ops"), Some(i)) => {
            let name = transcript.pointer(&format!("/ops/{i}/op")).and_then(Value::as_str).unwrap_or("?");
            format!("op {i} ({name})")
        }
        (Some("final"), Some("events")) => "the final log".into(),
        (Some("final"), Some("session")) => "the final session header".into(),
        (Some("final"), Some(part)) => format!("the final {part}"),
        _ => "the transcript".into(),
    }
}

/// The transcript as it is written: pretty-printed (keys sorted), with a final newline.
pub fn to_text(transcript: &Value) -> String {
    let mut s = serde_json::to_string_pretty(transcript).expect("a transcript serialises");
    s.push('\n');
    s
}

/// Writes `text` to `path` through a temporary file, so a reader never sees half a file.
fn write_file(path: &Path, text: &str) -> Result<(), String> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // A temporary file of this write's own (several test processes may write the same
    // transcript copy under target/tmp at once: a shared temporary name made one's rename fail),
    // renamed over the file in one step.
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(|e| format!("{}: {e}", tmp.path().display()))?;
    #[cfg(unix)]
    {
        // The mode a plain write gives (a temporary file is created 0600).
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o644));
    }
    tmp.persist(path).map(drop).map_err(|e| format!("{}: {e}", path.display()))
}

/// Settles one scenario's transcript against its golden file, the same way for every store:
/// when blessing, writes the file; otherwise compares and, when they differ, says where first
/// (op, JSON Pointer, expected and got) and where this run's transcript was written (`variant`
/// names the store, so two variants do not overwrite each other's copies).
pub fn settle(scenario: &Path, transcript: &Value, variant: &str) -> Result<(), String> {
    let golden = golden_path(scenario);
    let text = to_text(transcript);
    if blessing() {
        let before = std::fs::read_to_string(&golden).ok();
        if before.as_deref() != Some(text.as_str()) {
            write_file(&golden, &text)?;
            println!("{}  {}", if before.is_some() { "updated" } else { "new    " }, golden.display());
        }
        return Ok(());
    }
    let stem = golden.file_name().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    let got_path = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("scenario-transcripts-{variant}")).join(stem);
    write_file(&got_path, &text)?;
    let hint = format!(
        "this run's transcript: {}\n      if the change is intended, regenerate the golden files with scripts/scenario-golden.sh",
        got_path.display()
    );
    let want_text = match std::fs::read_to_string(&golden) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!("the golden transcript {} is missing\n      {hint}", golden.display()));
        }
        Err(e) => return Err(format!("{}: {e}", golden.display())),
    };
    let want: Value = serde_json::from_str(&want_text).map_err(|e| format!("{}: not JSON: {e}", golden.display()))?;
    match first_difference(&want, transcript) {
        None => Ok(()),
        Some((pointer, w, g)) => Err(format!(
            "the transcript differs from {} at {}, {pointer}\n      expected: {}\n      got:      {}\n      {hint}",
            golden.display(),
            place(&want, &pointer),
            shown(w),
            shown(g),
        )),
    }
}

/// The golden files under the scenario directories of `scenarios` that belong to no scenario
/// file: removed when blessing, reported otherwise.
pub fn stale(scenarios: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = scenarios.iter().map(|s| golden_path(s).parent().unwrap().to_path_buf()).collect();
    dirs.sort();
    dirs.dedup();
    let known: Vec<PathBuf> = scenarios.iter().map(|s| golden_path(s)).collect();
    let mut out = Vec::new();
    for d in dirs {
        let Ok(entries) = std::fs::read_dir(&d) else { continue };
        for p in entries.filter_map(|e| e.ok().map(|e| e.path())) {
            if p.extension().is_some_and(|x| x == "json") && !known.contains(&p) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_difference_names_the_pointer() {
        let a = json!({"ops": [{"op": "turn", "x": 1}, {"op": "request", "request": {"digest": "a"}}], "final": {}});
        let mut b = a.clone();
        assert_eq!(first_difference(&a, &b), None);
        b["ops"][1]["request"]["digest"] = "b".into();
        let (p, w, g) = first_difference(&a, &b).unwrap();
        assert_eq!(p, "/ops/1/request/digest");
        assert_eq!((w, g), (Some(&json!("a")), Some(&json!("b"))));
        assert_eq!(place(&a, &p), "op 1 (request)");
        b["ops"][0]["a/b"] = 2.into();
        assert_eq!(first_difference(&a, &b).unwrap().0, "/ops/0/a~1b");
        assert_eq!(first_difference(&a, &b).unwrap().1, None);
    }

    #[test]
    fn masks_sidecar_times_and_the_directory() {
        let mut v = json!(["/tmp/x/load-1.jsonl.cut-1712345678901", {"k": "/tmp/x/a.cut-"}]);
        mask_strings(&mut v, "/tmp/x");
        assert_eq!(v, json!(["<dir>/load-1.jsonl.cut-<time>", {"k": "<dir>/a.cut-"}]));
    }
}
