//! Token counters: calibration against the DeepSeek-V3 tokenizer, exact counts, framing rules,
//! tokenizer load errors and the host counter.
//!
//! Tests that need the DeepSeek-V3 tokenizer read its path from `LLMSESSION_DEEPSEEK_TOKENIZER`
//! (default `${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/deepseek-v3/tokenizer.json`) and fail
//! when it is absent: run `scripts/fetch-deepseek-tokenizer.sh` first.

use llmsession::tokens::{
    estimate_text, Countable, Estimator, HostCounter, TokenCounter, TokenizerCounter, IMAGE_TOKENS, MESSAGE_OVERHEAD, SYSTEM_OVERHEAD,
    TOOL_CALL_OVERHEAD, TOOL_OVERHEAD, TOOL_RESULT_OVERHEAD,
};
use llmsession::{Block, Error, ErrorKind, Message, Role, ToolSchema};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

// ---------------------------------------------------------------------------------------------
// Fixtures

fn tokenizer_path() -> PathBuf {
    if let Some(p) = std::env::var_os("LLMSESSION_DEEPSEEK_TOKENIZER") {
        return PathBuf::from(p);
    }
    let cache = match std::env::var_os("LLMSESSION_CACHE") {
        Some(c) => PathBuf::from(c),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/llmsession"),
    };
    cache.join("deepseek-v3/tokenizer.json")
}

fn require_tokenizer_file() -> PathBuf {
    let path = tokenizer_path();
    assert!(
        path.is_file(),
        "the DeepSeek-V3 tokenizer is missing at {}: run scripts/fetch-deepseek-tokenizer.sh \
         (or point LLMSESSION_DEEPSEEK_TOKENIZER at a tokenizer.json)",
        path.display()
    );
    path
}

/// The counter under test, loaded once per test binary.
fn deepseek() -> &'static TokenizerCounter {
    static COUNTER: OnceLock<TokenizerCounter> = OnceLock::new();
    COUNTER.get_or_init(|| {
        let path = require_tokenizer_file();
        TokenizerCounter::from_file(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
    })
}

/// The tokenizer itself, loaded through the `tokenizers` crate directly (the reference).
fn reference() -> &'static tokenizers::Tokenizer {
    static TOKENIZER: OnceLock<tokenizers::Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| {
        let path = require_tokenizer_file();
        tokenizers::Tokenizer::from_file(&path).unwrap_or_else(|e| panic!("loading {}: {e}", path.display()))
    })
}

const CORPORA: [&str; 3] = ["prose_en.txt", "code.txt", "prose_zh.txt"];

fn corpus(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokens").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

fn tool(name: &str, description: &str) -> ToolSchema {
    ToolSchema::from_value(
        &json!({
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
        }),
        "tool",
    )
    .unwrap()
}

fn message(v: Value) -> Message {
    Message::from_value(&v, "message").unwrap()
}

// ---------------------------------------------------------------------------------------------
// (1) Calibration of the estimate

#[test]
fn estimate_is_within_ten_percent_of_deepseek_on_each_corpus() {
    let counter = deepseek();
    for name in CORPORA {
        let text = corpus(name);
        let exact = counter.count_text(&text).unwrap();
        let estimate = estimate_text(&text);
        let error = (estimate as f64 - exact as f64) / exact as f64;
        assert!(error.abs() <= 0.10, "{name}: estimate {estimate} vs DeepSeek-V3 {exact} tokens ({:+.1} %), outside ±10 %", error * 100.0);
    }
}

#[test]
fn corpora_are_of_the_documented_size() {
    for name in CORPORA {
        let bytes = corpus(name).len();
        assert!((3000..=6500).contains(&bytes), "{name} is {bytes} bytes");
    }
}

// ---------------------------------------------------------------------------------------------
// (2) Exact counts equal the tokenizer's own encoding length

#[test]
fn count_text_equals_the_tokenizer_encoding_length() {
    let counter = deepseek();
    let reference = reference();
    let mut samples: Vec<String> = CORPORA.iter().map(|n| corpus(n)).collect();
    samples.push("Hello, world!".into());
    samples.push("fn main() {\n    println!(\"{}\", 1 + 2);\n}\n".into());
    samples.push("混合 text 与 123456 数字".into());
    for text in &samples {
        let expected = reference.encode(text.as_str(), false).unwrap().len() as u64;
        assert_eq!(counter.count_text(text).unwrap(), expected, "text starting {:?}", &text[..text.len().min(30)]);
    }
    assert_eq!(counter.count_text("").unwrap(), 0);
    assert_eq!(counter.name(), "tokenizer");
    assert_eq!(counter.source(), tokenizer_path().display().to_string());
}

#[test]
fn tokenizer_counter_applies_the_same_framing_rules() {
    let counter = deepseek();
    let text = "The ledger is not for the shop as it is today.";
    let m = Message::user_text(text);
    assert_eq!(counter.count(Countable::Message(&m)).unwrap(), MESSAGE_OVERHEAD + counter.count_text(text).unwrap());
    assert_eq!(counter.count(Countable::System(text)).unwrap(), SYSTEM_OVERHEAD + counter.count_text(text).unwrap());
    let tools = [tool("read_file", "Read a file.")];
    let json = serde_json::to_string(&tools[0]).unwrap();
    assert_eq!(counter.count(Countable::Tools(&tools)).unwrap(), TOOL_OVERHEAD + counter.count_text(&json).unwrap());
    let call = message(json!({"role":"assistant","content":[
        {"type":"tool-call","id":"c1","name":"read_file","arguments":"{\"path\":\"a.rs\"}"}]}));
    assert_eq!(
        counter.count(Countable::Message(&call)).unwrap(),
        MESSAGE_OVERHEAD
            + TOOL_CALL_OVERHEAD
            + counter.count_text("read_file").unwrap()
            + counter.count_text("{\"path\":\"a.rs\"}").unwrap()
    );
}

// ---------------------------------------------------------------------------------------------
// (3) Framing rules (with the estimate, which needs no file)

#[test]
fn system_prompt_is_text_plus_overhead_and_empty_is_zero() {
    let e = Estimator;
    assert_eq!(e.name(), "estimate");
    assert_eq!(e.count(Countable::System("")).unwrap(), 0);
    let text = "You are a careful assistant.";
    assert_eq!(e.count(Countable::System(text)).unwrap(), estimate_text(text) + SYSTEM_OVERHEAD);
}

#[test]
fn tools_are_their_json_text_plus_per_tool_overhead() {
    let e = Estimator;
    assert_eq!(e.count(Countable::Tools(&[])).unwrap(), 0);
    let a = tool("read_file", "Read a file from the workspace.");
    let b = tool("write_file", "Write a file in the workspace, replacing it.");
    let json_a = serde_json::to_string(&a).unwrap();
    let json_b = serde_json::to_string(&b).unwrap();
    assert!(json_a.starts_with("{\"name\":\"read_file\""), "{json_a}");
    let one = e.count(Countable::Tools(std::slice::from_ref(&a))).unwrap();
    assert_eq!(one, estimate_text(&json_a) + TOOL_OVERHEAD);
    let two = e.count(Countable::Tools(&[a, b])).unwrap();
    assert_eq!(two, one + estimate_text(&json_b) + TOOL_OVERHEAD);
}

#[test]
fn message_is_overhead_plus_text_and_reasoning() {
    let e = Estimator;
    let empty = Message::new(Role::User, vec![]);
    assert_eq!(e.count(Countable::Message(&empty)).unwrap(), MESSAGE_OVERHEAD);
    let m = message(json!({"role":"assistant","content":[
        {"type":"reasoning","text":"The user wants the totals per customer."},
        {"type":"text","text":"Here are the totals."}]}));
    assert_eq!(
        e.count(Countable::Message(&m)).unwrap(),
        MESSAGE_OVERHEAD + estimate_text("The user wants the totals per customer.") + estimate_text("Here are the totals.")
    );
}

#[test]
fn tool_call_counts_name_and_arguments_not_the_id() {
    let e = Estimator;
    let args = r#"{"path":"src/tokens/mod.rs","offset":120}"#;
    let call = |id: &str| message(json!({"role":"assistant","content":[{"type":"tool-call","id":id,"name":"read_file","arguments":args}]}));
    let short = e.count(Countable::Message(&call("c1"))).unwrap();
    assert_eq!(short, MESSAGE_OVERHEAD + TOOL_CALL_OVERHEAD + estimate_text("read_file") + estimate_text(args));
    let long = e.count(Countable::Message(&call("call_0123456789abcdefghijklmnopqrstuvwxyz"))).unwrap();
    assert_eq!(short, long, "the call id is part of the fixed overhead");
}

#[test]
fn tool_result_counts_its_content_recursively() {
    let e = Estimator;
    let m = message(json!({"role":"user","content":[{"type":"tool-result","toolCallId":"c1","isError":false,"content":[
        {"type":"text","text":"fn main() {}"},
        {"type":"image","mediaType":"image/png","data":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="},
        {"type":"tool-result","toolCallId":"c0","isError":true,"content":[{"type":"text","text":"not found"}]}
    ]}]}));
    let expected = MESSAGE_OVERHEAD
        + TOOL_RESULT_OVERHEAD
        + estimate_text("fn main() {}")
        + IMAGE_TOKENS
        + TOOL_RESULT_OVERHEAD
        + estimate_text("not found");
    assert_eq!(e.count(Countable::Message(&m)).unwrap(), expected);
}

#[test]
fn image_has_a_fixed_cost_and_other_opaque_blocks_count_their_json() {
    let e = Estimator;
    let small = message(json!({"role":"user","content":[{"type":"image","url":"https://x/y.png"}]}));
    let big = message(json!({"role":"user","content":[{"type":"image","data":"A".repeat(100_000)}]}));
    assert_eq!(e.count(Countable::Message(&small)).unwrap(), MESSAGE_OVERHEAD + IMAGE_TOKENS);
    assert_eq!(e.count(Countable::Message(&big)).unwrap(), MESSAGE_OVERHEAD + IMAGE_TOKENS);

    let block = json!({"type":"citation","source":"docs/log.md","quote":"append-only event log"});
    let m = message(json!({"role":"user","content":[block]}));
    let text = serde_json::to_string(&m.content[0]).unwrap();
    assert!(text.contains("\"citation\""), "{text}");
    assert_eq!(e.count(Countable::Message(&m)).unwrap(), MESSAGE_OVERHEAD + estimate_text(&text));
}

#[test]
fn metadata_is_not_counted() {
    let e = Estimator;
    let plain = message(json!({"role":"assistant","content":[{"type":"text","text":"Done."}]}));
    let rich = message(json!({"role":"assistant","provenance":{"provider":"deepseek","model":"deepseek-chat"},
        "meta":{"trace":"a long trace id that the model never sees"},
        "content":[{"type":"text","text":"Done.","cache":{"ttl":"1h"}}]}));
    assert_eq!(e.count(Countable::Message(&plain)).unwrap(), e.count(Countable::Message(&rich)).unwrap());
}

#[test]
fn estimate_basics() {
    assert_eq!(estimate_text(""), 0);
    assert_eq!(estimate_text("a"), 1);
    assert_eq!(estimate_text(" "), 1);
    assert_eq!(estimate_text("hello"), 1);
    assert_eq!(estimate_text("hello world"), 2);
    // Digits go in groups of three.
    assert_eq!(estimate_text("123456789"), 3);
    // Deterministic and additive in the obvious way for repeated text.
    let text = corpus("code.txt");
    assert_eq!(estimate_text(&text), estimate_text(&text.clone()));
    // CJK: a per-character rate well above a letter's share of an English word.
    let han = "山城的夜班公交".repeat(10); // 70 Han characters
    let n = estimate_text(&han);
    assert!((35..=55).contains(&n), "70 Han characters estimated at {n}");
    let kana = "ひらがなカタカナ".repeat(10); // 80 Kana
    assert!((45..=70).contains(&estimate_text(&kana)), "{}", estimate_text(&kana));
    let hangul = "작은서점에들렀습니다".repeat(10); // 100 Hangul syllables
    assert!((70..=100).contains(&estimate_text(&hangul)), "{}", estimate_text(&hangul));
    // English prose is around four to five characters per token.
    let prose = corpus("prose_en.txt");
    let ratio = prose.len() as f64 / estimate_text(&prose) as f64;
    assert!((3.8..=5.5).contains(&ratio), "{ratio}");
}

#[test]
fn estimate_sees_indentation_and_long_whitespace() {
    // Indentation is about one token per run, however deep.
    let shallow = estimate_text("x\n    y");
    let deep = estimate_text("x\n                y");
    assert_eq!(shallow, deep);
    // Very long whitespace is not free.
    assert!(estimate_text(&" ".repeat(1000)) >= 10);
    assert!(estimate_text(&"\n".repeat(1000)) >= 50);
}

// ---------------------------------------------------------------------------------------------
// (4) Tokenizer load errors name the path

#[test]
fn missing_tokenizer_file_is_a_tokenizer_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope").join("tokenizer.json");
    let err = TokenizerCounter::from_file(&path).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tokenizer);
    let shown = path.display().to_string();
    assert!(err.message().contains(&shown), "{}", err.message());
    assert!(err.message().contains("cannot read"), "{}", err.message());
    assert_eq!(err.detail().get("path"), Some(&Value::from(shown)));
}

#[test]
fn malformed_tokenizer_file_is_a_tokenizer_error_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    for (name, body) in
        [("garbage.json", "this is not json {"), ("wrong-shape.json", r#"{"model": {"type": "NoSuchModel"}}"#), ("empty.json", "")]
    {
        let path = dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        let err = TokenizerCounter::from_file(&path).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Tokenizer, "{name}");
        let shown = path.display().to_string();
        assert!(err.message().contains(&shown), "{name}: {}", err.message());
        assert!(err.message().contains("not a valid tokenizer.json"), "{name}: {}", err.message());
        assert_eq!(err.detail().get("path"), Some(&Value::from(shown)));
    }
    let err = TokenizerCounter::from_bytes(b"[1,2,3]").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Tokenizer);
    assert!(err.message().starts_with("<bytes> is not a valid tokenizer.json"), "{}", err.message());
}

/// Devices, FIFOs and directories are refused without reading or waiting (reading /dev/zero
/// never ends; opening a FIFO waits for a writer), and so is a file over the size limit
/// (a sparse one: nothing is read to find out).
#[test]
fn tokenizer_files_must_be_regular_files_within_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("tokenizer.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let huge = dir.path().join("huge.json");
    std::fs::File::create(&huge).unwrap().set_len(llmsession::store::file::MAX_TOKENIZER_BYTES + 1).unwrap();
    for (path, why) in [
        (PathBuf::from("/dev/zero"), "not a regular file (a character device)".to_string()),
        (fifo, "not a regular file (a FIFO)".to_string()),
        (dir.path().to_path_buf(), "not a regular file (a directory)".to_string()),
        (huge, format!("more than the limit of {} bytes", llmsession::store::file::MAX_TOKENIZER_BYTES)),
    ] {
        let err = TokenizerCounter::from_file(&path).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Tokenizer, "{}", path.display());
        let shown = path.display().to_string();
        assert!(err.message().contains(&shown) && err.message().contains(&why), "{}", err.message());
        assert_eq!(err.detail().get("path"), Some(&Value::from(shown)));
    }
}

/// A symbolic link is followed (model caches link tokenizer.json to a content-addressed blob).
#[test]
fn a_tokenizer_behind_a_symbolic_link_loads() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("tokenizer.json");
    std::os::unix::fs::symlink(require_tokenizer_file(), &link).unwrap();
    let t = TokenizerCounter::from_file(&link).unwrap();
    assert_eq!(t.count_text("hello world").unwrap(), deepseek().count_text("hello world").unwrap());
}

// ---------------------------------------------------------------------------------------------
// (5) Host counter

#[test]
fn host_counter_receives_the_item_json() {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let sink = seen.clone();
    let host = HostCounter::new(move |v: &Value| {
        sink.lock().unwrap().push(v.clone());
        Ok(v.to_string().len() as u64)
    });
    assert_eq!(host.name(), "host");

    let tools = [tool("read_file", "Read a file.")];
    let m = message(json!({"role":"assistant","content":[{"type":"text","text":"hi"}],
        "provenance":{"provider":"p","model":"m"}}));
    let n_sys = host.count(Countable::System("Be brief.")).unwrap();
    host.count(Countable::Tools(&tools)).unwrap();
    host.count(Countable::Message(&m)).unwrap();

    let seen = seen.lock().unwrap();
    assert_eq!(seen[0], json!({"kind":"system","text":"Be brief."}));
    assert_eq!(n_sys, seen[0].to_string().len() as u64, "the callback's number is returned as is");
    assert_eq!(seen[1], json!({"kind":"tools","tools":[serde_json::to_value(&tools[0]).unwrap()]}));
    assert_eq!(seen[1]["tools"][0]["name"], "read_file");
    assert_eq!(seen[2], json!({"kind":"message","message":m.to_value()}));
    assert_eq!(seen[2]["message"]["provenance"]["model"], "m");
    assert_eq!(Countable::Message(&m).to_json(), seen[2]);
}

#[test]
fn host_counter_errors_are_listener_errors_with_the_reason() {
    let host = HostCounter::new(|v: &Value| {
        if v["kind"] == "message" {
            Err(Error::new(ErrorKind::InvalidInput, "model not loaded").with("code", 7))
        } else {
            Ok(1)
        }
    });
    assert_eq!(host.count(Countable::System("x")).unwrap(), 1);
    let m = Message::user_text("hello");
    let err = host.count(Countable::Message(&m)).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Listener);
    assert_eq!(err.message(), "host token counter failed on a message item: model not loaded");
    assert_eq!(err.detail().get("counter"), Some(&Value::from("host")));
    assert_eq!(err.detail().get("item"), Some(&Value::from("message")));
    assert_eq!(err.detail().get("code"), Some(&Value::from(7)));

    let cancelled = HostCounter::new(|_: &Value| Err(Error::new(ErrorKind::Cancelled, "cancelled")));
    let err = cancelled.count(Countable::Tools(&[])).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    assert!(err.message().contains("tools item"), "{}", err.message());
}

#[test]
fn counters_are_usable_as_trait_objects() {
    let counters: Vec<Box<dyn TokenCounter>> = vec![Box::new(Estimator), Box::new(HostCounter::new(|_: &Value| Ok(42)))];
    let m = Message::user_text("hello");
    let counts: Vec<u64> = counters.iter().map(|c| c.count(Countable::Message(&m)).unwrap()).collect();
    assert_eq!(counts, vec![MESSAGE_OVERHEAD + 1, 42]);
    let block = Block::text("x");
    assert_eq!(block.kind(), "text");
}
