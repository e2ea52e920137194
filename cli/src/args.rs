//! The command line, as clap parses it: the commands, their arguments and options, and the help
//! text (which states the exit codes). A usage error (an unknown command or option, a missing or
//! extra argument, a value that does not parse) is clap's: a message on stderr and exit 2.

use clap::{Parser, Subcommand};

/// The provider renderers `--render` accepts (the names `Renderer::parse` takes).
pub const RENDERERS: [&str; 5] = ["openai", "openai-responses", "anthropic", "gemini", "gemini-interactions"];

/// The transcript formats `--from` reads.
pub const FORMATS: [&str; 2] = ["claude-code", "codex"];

/// What `llmsession --help` prints after the commands.
const AFTER_HELP: &str = "\
LOG is a JSONL file path, file:PATH, or a PostgreSQL URL
(postgres://USER:PASSWORD@HOST:PORT/DB?session=ID, or postgresql://...). Every command but
store-check reads without a lock or lease and writes nothing, so it works on a log a live agent
is writing. With --from claude-code|codex (explain, simulate), LOG is another harness's
transcript file, read read-only.
Options may come before or after LOG; `--step=2` and `--step 2` are the same.

Exit status:
  0  success
  1  any other failure (a request the log does not have, a library error)
  2  usage error: an unknown command or option, a missing or extra argument, a bad value
     (show --step two, explain --step two, --render cohere)
  3  the log is bad: a record is damaged, breaks the log rules or does not match its chained
     digest, or the file is not a session log (every command checks the log as opening it
     does); or (verify) a request rebuilt from the log differs from the one that was sent; or
     (--from) a line of the transcript is not what its format writes
  4  the store could not be read: a missing or unreadable file, a refused or failed database
     connection, a database that does not hold the session, a URL that names none

With --json, a failure (exit 1, 3 or 4) also writes {\"ok\": false, \"error\": {...}} on stdout.
No message shows a password: LOG is shown without the one in its user part or in ?password=.
docs/cli.md describes every command and its JSON output.";

const LOG_HELP: &str = "The session log: a JSONL file, file:PATH, or postgres://USER:PASSWORD@HOST:PORT/DB?session=ID";

/// `llmsession`: inspect, verify and explain session logs.
#[derive(Debug, Parser)]
#[command(
    name = "llmsession",
    version,
    propagate_version = true,
    about = "Inspect, verify and explain llmsession session logs",
    after_help = AFTER_HELP,
    arg_required_else_help = true,
    subcommand_required = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Machine-readable output: one JSON document on stdout (its shape: docs/cli.md)
    #[arg(long, global = true)]
    pub json: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check the log and rebuild every request from it; name the first that differs
    ///
    /// Runs every check opening the log makes (the chained digest of every record, the log
    /// rules), then rebuilds every request from the log and names the first one that differs
    /// from what was sent; with --render, every provider body too. Exit 3 when the log is bad.
    Verify {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
        /// Also build every request's body for this provider and check it
        #[arg(long, value_name = "NAME", value_parser = RENDERERS)]
        render: Option<String>,
        /// Show a progress bar on stderr (the default when stderr is a terminal, without --json)
        #[arg(long, conflicts_with = "no_progress")]
        progress: bool,
        /// No progress bar
        #[arg(long = "no-progress")]
        no_progress: bool,
    },
    /// Per request: messages, shared prefix, header changes, cached tokens
    ///
    /// Per conversation request: the messages, the leading messages shared with the previous
    /// request, header changes, compactions, and the provider-reported cached tokens and hit
    /// ratio.
    Stats {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
    },
    /// Per request: where and why the cacheable prefix diverges, and what it cost
    ///
    /// Per request (and summarisation request cN): the cacheable prefix it shares with the
    /// request the provider could have cached, in bytes and tokens, where and why it diverges,
    /// the expected cacheable tokens beside the provider's cached tokens, and the prompt spend
    /// by cause.
    Explain {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
        /// Only this request: N (a conversation request, 1-based), cN (a summarisation request)
        /// or kN (a keep-warm request)
        #[arg(long, value_name = "ID", value_parser = request_id)]
        step: Option<String>,
        /// A price table (JSON, per provider or provider/model, per million tokens: input,
        /// cachedInput, cacheWrite, output): adds the cost per request and cause and the cost
        /// with no cache
        #[arg(long, value_name = "FILE")]
        prices: Option<String>,
        /// Overrides of the providers' cache TTLs and minimum cacheable sizes (JSON, per
        /// provider or provider/model: ttlSeconds, minTokens)
        #[arg(long = "cache-rules", value_name = "FILE")]
        cache_rules: Option<String>,
        /// Explain the whole tree rooted at LOG (its spawned children and forks, beside it in
        /// files named after it, or in the same database): per node and rolled up, each child's
        /// spawn floor apart from its work, and the tree with cold children
        #[arg(long, conflicts_with_all = ["step", "from"])]
        tree: bool,
        /// LOG is another harness's transcript, read read-only: its idle gaps are priced
        /// (what each option would have cost, what the cache clock decided); needs --prices
        #[arg(long = "from", value_name = "FORMAT", value_parser = FORMATS, conflicts_with = "step")]
        from: Option<String>,
    },
    /// The tree of a session: its spawned children and forks, and theirs, each verified
    ///
    /// Reads the session and its descendants (for a JSONL file, the files beside it named
    /// after it, STEM.TAG.jsonl; for a database URL, the sessions whose parent it is), verifies
    /// every node (every request rebuilt from its own log) and every link (a child's seed is its
    /// parent's events, its parent records it), and prints the tree. Exit 3 when a node or a link
    /// is bad.
    Tree {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
    },
    /// Replay sessions under the cache clock's policies and price each
    ///
    /// Replays each LOG's requests, at their recorded times and sizes, under the policies
    /// threshold (what was recorded), clock (the cache clock, online), optimal (clairvoyant
    /// over the same actions) and clock+compact / optimal+compact (compaction before expiry
    /// allowed), and prints each one's cost and its ratio to its optimum, per session and in
    /// aggregate. docs/simulate.md states every pricing assumption.
    Simulate {
        /// The sessions: llmsession logs, or with --from other harnesses' transcripts
        #[arg(value_name = "LOG", required = true, num_args = 1..)]
        logs: Vec<String>,
        /// The price table (JSON, per provider or provider/model, per million tokens: input,
        /// cachedInput, cacheWrite, output); every request needs a price
        #[arg(long, value_name = "FILE", required = true)]
        prices: String,
        /// Overrides of the providers' cache TTLs and minimum cacheable sizes (JSON, per
        /// provider or provider/model: ttlSeconds, minTokens)
        #[arg(long = "cache-rules", value_name = "FILE")]
        cache_rules: Option<String>,
        /// The LOGs are other harnesses' transcripts, read read-only
        #[arg(long = "from", value_name = "FORMAT", value_parser = FORMATS)]
        from: Option<String>,
        /// The simulation's assumptions (JSON: tierBilling, marginMs, pingOutputTokens,
        /// keepalive, summaryRatio, summaryMaxTokens, instructionTokens, returnModel, keepWarmBudget,
        /// keepWarmTiers)
        #[arg(long, value_name = "FILE")]
        options: Option<String>,
    },
    /// The reconstructed request N: its envelope, or a provider's body
    ///
    /// Rebuilds request N (1-based, in log order) from the log and prints its envelope, or with
    /// --render the body that provider's renderer builds from it.
    Show {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
        /// The request to show (1 = the first request of the log)
        #[arg(long, value_name = "N", required = true)]
        step: usize,
        /// Print the body this provider's renderer builds instead of the envelope
        #[arg(long, value_name = "NAME", value_parser = RENDERERS)]
        render: Option<String>,
    },
    /// The header history with readable diffs; drift at resume is marked
    Headers {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
    },
    /// The sessions a store holds (a database: many; a file: one)
    Sessions {
        /// The store: a JSONL file, file:PATH, or postgres://USER:PASSWORD@HOST:PORT/DB
        #[arg(value_name = "URL")]
        url: String,
    },
    /// Write a checkpoint into a log, so that it opens from there (it writes)
    ///
    /// Opens the log for writing (its lock or lease), checks all of it as verify's first part
    /// does, and appends a checkpoint: the derived state an open needs. A log written before
    /// checkpoints existed then opens from its end; logs gain checkpoints by themselves as they
    /// are appended to. Exit 3 when the log is bad.
    Checkpoint {
        #[arg(value_name = "LOG", help = LOG_HELP)]
        log: String,
    },
    /// Run the store conformance kit against a store (it writes: one session per case)
    ///
    /// Runs the cases of the store conformance kit (docs/storage.md, "Conformance kit for your
    /// own store") against the store: file:DIR (a directory; one log per case is created in it)
    /// or postgres://USER:PASSWORD@HOST:PORT/DB (one session per case, left in the database).
    /// Unlike every other command it writes. Exit 1 when a case fails.
    StoreCheck {
        /// The store: file:DIR or postgres://USER:PASSWORD@HOST:PORT/DB (no session=)
        #[arg(value_name = "URL")]
        url: String,
        /// Run only this case (repeat for more)
        #[arg(long = "case", value_name = "NAME")]
        cases: Vec<String>,
    },
}

impl Command {
    /// The LOG (or URL) the command reads, as given.
    pub fn log(&self) -> &str {
        match self {
            Command::Verify { log, .. }
            | Command::Stats { log }
            | Command::Explain { log, .. }
            | Command::Show { log, .. }
            | Command::Headers { log }
            | Command::Tree { log } => log,
            Command::Sessions { url } | Command::StoreCheck { url, .. } => url,
            Command::Checkpoint { log } => log,
            Command::Simulate { logs, .. } => &logs[0],
        }
    }
}

/// An `explain --step` ID: `N` (a conversation request), `cN` (a summarisation request), `nN`
/// (a native compaction request) or `kN` (a keep-warm request of the cache clock), N a number as
/// `show --step` takes it; written back without leading zeros (`02` is `2`). Anything else is a
/// usage error (exit 2), as a malformed `show --step` is.
fn request_id(s: &str) -> Result<String, String> {
    let (prefix, digits) = match (s.strip_prefix('c'), s.strip_prefix('n'), s.strip_prefix('k')) {
        (Some(rest), _, _) => ("c", rest),
        (_, Some(rest), _) => ("n", rest),
        (_, _, Some(rest)) => ("k", rest),
        _ => ("", s),
    };
    match digits.parse::<usize>() {
        Ok(n) => Ok(format!("{prefix}{n}")),
        Err(_) => Err(
            "expected N (a conversation request, 1-based), cN (a summarisation request), nN (a native compaction request) or kN (a keep-warm request)"
                .into(),
        ),
    }
}
