//! `request/header-delta` (docs/contract.md §3.2): the difference between two request headers.
//!
//! A [`HeaderDelta`] has four optional arms:
//!
//! - `system`: a line edit of the system prompt ([`SystemEdit`]): keep `keepLeading` leading
//!   and `keepTrailing` trailing lines of the old text and put the `insert` lines between them.
//! - `tools`: an edit of the tool list ([`ToolsEdit`]): tools removed by name, tools whose
//!   schema changed (replaced in place by name), the new relative order of the kept tools when
//!   it changed, and added tools with their index in the final list.
//! - `config`: the whole new [`CallConfig`].
//! - `messagePrefix`: the whole new session prefix; an empty array means "now absent".
//!
//! # Lines
//!
//! The lines of a text are what [`system_lines`] returns: the empty text (and an absent
//! system prompt) has no lines; any other text is split on every `'\n'`, so a text with `k`
//! newlines has `k + 1` lines and a trailing newline shows up as a final empty line
//! (`"a\n"` is `["a", ""]`, `"\n"` is `["", ""]`). Joining the lines with `'\n'` gives the
//! text back exactly, which is why `diff(a, b).apply(a) == b` holds for every pair of
//! strings. A line never contains `'\n'`; an `insert` entry that does is rejected. An edit
//! whose result is the empty text makes the system prompt absent (canonical form).
//!
//! # Wire form
//!
//! ```json
//! {"system":{"keepLeading":2,"keepTrailing":1,"insert":["new line"]},
//!  "tools":{"removed":["old"],"changed":[{"name":"t","description":"…","parameters":{}}],
//!           "order":["t","u"],"added":[{"index":0,"tool":{"name":"n","description":"…","parameters":{}}}]},
//!  "config":{"provider":"p","model":"m"},
//!  "messagePrefix":[]}
//! ```
//!
//! Arms are absent when unused, never `null`. Unknown arms and unknown keys inside the
//! `system`, `tools` and `added[i]` objects are rejected: a fold cannot apply an edit it does
//! not understand. A delta with no arm (`{}`) and a `tools` arm that names nothing are
//! rejected too: the header log writes nothing when the header did not change, so such an
//! event is never written by a correct writer. (An empty [`HeaderDelta`] is still a valid
//! value in Rust: [`HeaderDelta::apply`] returns the base unchanged.)
//!
//! # Writers
//!
//! The session prefix is frozen per agent instance and its only durable record is the
//! anchoring snapshot, so a delta writer never writes the `messagePrefix` arm: use
//! [`diff_for_writer`], which returns `None` when the prefix differs (write a snapshot then).
//! [`diff`] includes the `messagePrefix` arm and exists for codec completeness and tools.

use crate::error::{Error, Result};
use crate::header::EpochHeader;
use crate::types::{kind_of, CallConfig, Fields, JsonMap, Message, ToolSchema};
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

/// The arms a delta object may have.
const ARMS: &[&str] = &["system", "tools", "config", "messagePrefix"];

/// The lines of a system prompt as the `system` arm counts them.
///
/// The empty text has no lines; any other text is split on every `'\n'` (so a trailing
/// newline yields a final empty line). `system_lines(t).join("\n") == t` for every `t`.
pub fn system_lines(text: &str) -> Vec<&str> {
    if text.is_empty() {
        Vec::new()
    } else {
        text.split('\n').collect()
    }
}

/// A line edit of the system prompt: keep `keep_leading` leading and `keep_trailing`
/// trailing lines of the old text, with `insert` between them (see [`system_lines`]).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SystemEdit {
    /// How many leading lines of the old text are kept.
    pub keep_leading: usize,
    /// How many trailing lines of the old text are kept.
    pub keep_trailing: usize,
    /// The lines put between the kept ones; none contains `'\n'`.
    pub insert: Vec<String>,
}

/// A tool added by a [`ToolsEdit`], with its index in the final tool list.
#[derive(Clone, Debug, PartialEq)]
pub struct AddedTool {
    /// The tool's index in the resulting list.
    pub index: usize,
    /// The full schema.
    pub tool: ToolSchema,
}

/// An edit of the tool list.
///
/// Applied in this order: drop the `removed` tools; replace each `changed` tool (by name,
/// in place); if `order` is given, reorder the remaining tools to it (it must list each of
/// them exactly once); insert the `added` tools at their indices, in increasing index order.
/// Any target list is reachable, including a pure reordering.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct ToolsEdit {
    /// Names of base tools to drop.
    pub removed: Vec<String>,
    /// Full schemas replacing the base tool of the same name.
    pub changed: Vec<ToolSchema>,
    /// The new relative order of the kept (not removed, not added) tools, when it changed.
    pub order: Option<Vec<String>>,
    /// New tools with their final index, in strictly increasing index order.
    pub added: Vec<AddedTool>,
}

impl ToolsEdit {
    /// True when the edit names nothing (no removal, change, order or addition).
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty() && self.changed.is_empty() && self.order.is_none() && self.added.is_empty()
    }
}

/// The `delta` of a `request/header-delta` event: the difference between two headers.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct HeaderDelta {
    /// A line edit of the system prompt.
    pub system: Option<SystemEdit>,
    /// An edit of the tool list.
    pub tools: Option<ToolsEdit>,
    /// The whole new call config.
    pub config: Option<CallConfig>,
    /// The whole new session prefix; an empty list makes the prefix absent.
    pub message_prefix: Option<Arc<Vec<Message>>>,
}

/// The difference between two headers, with every arm needed, `messagePrefix` included.
///
/// `diff(from, to).apply(from) == to` for every pair of headers; the delta is empty exactly
/// when the headers are equal.
pub fn diff(from: &EpochHeader, to: &EpochHeader) -> HeaderDelta {
    let mut d = diff_without_prefix(from, to);
    if from.prefix() != to.prefix() {
        d.message_prefix = Some(to.message_prefix.clone().unwrap_or_default());
    }
    d
}

/// The difference between two headers for a delta writer, which never writes the
/// `messagePrefix` arm: `None` when the prefixes differ (the writer owes a snapshot then),
/// otherwise the delta (empty when the headers are equal: nothing is written).
pub fn diff_for_writer(from: &EpochHeader, to: &EpochHeader) -> Option<HeaderDelta> {
    if needs_snapshot(from, to) {
        None
    } else {
        Some(diff_without_prefix(from, to))
    }
}

/// True when moving from `from` to `to` cannot be written as a delta because the session
/// prefix differs (absent equal to empty).
pub fn needs_snapshot(from: &EpochHeader, to: &EpochHeader) -> bool {
    from.prefix() != to.prefix()
}

/// The system, tools and config arms of [`diff`], ignoring the session prefix.
fn diff_without_prefix(from: &EpochHeader, to: &EpochHeader) -> HeaderDelta {
    HeaderDelta {
        system: diff_system(from.system_str(), to.system_str()),
        tools: diff_tools(from.tools_slice(), to.tools_slice()),
        config: (from.config != to.config).then(|| to.config.clone()),
        message_prefix: None,
    }
}

fn diff_system(from: &str, to: &str) -> Option<SystemEdit> {
    if from == to {
        return None;
    }
    let a = system_lines(from);
    let b = system_lines(to);
    let lead = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let room = a.len().min(b.len()) - lead;
    let trail = a.iter().rev().zip(b.iter().rev()).take(room).take_while(|(x, y)| x == y).count();
    Some(SystemEdit { keep_leading: lead, keep_trailing: trail, insert: b[lead..b.len() - trail].iter().map(|s| s.to_string()).collect() })
}

fn diff_tools(from: &[ToolSchema], to: &[ToolSchema]) -> Option<ToolsEdit> {
    if from == to {
        return None;
    }
    let find = |list: &[ToolSchema], name: &str| list.iter().position(|t| t.name == name);
    let mut edit = ToolsEdit::default();
    for t in from {
        if find(to, &t.name).is_none() {
            edit.removed.push(t.name.clone());
        }
    }
    let mut kept_new_order = Vec::new();
    for (index, t) in to.iter().enumerate() {
        match find(from, &t.name) {
            Some(i) => {
                kept_new_order.push(t.name.clone());
                if from[i] != *t {
                    edit.changed.push(t.clone());
                }
            }
            None => edit.added.push(AddedTool { index, tool: t.clone() }),
        }
    }
    let kept_old_order: Vec<&String> = from.iter().map(|t| &t.name).filter(|n| find(to, n).is_some()).collect();
    if kept_old_order.iter().copied().ne(kept_new_order.iter()) {
        edit.order = Some(kept_new_order);
    }
    Some(edit)
}

impl HeaderDelta {
    /// True when the delta has no arm (applying it changes nothing).
    pub fn is_empty(&self) -> bool {
        self.system.is_none() && self.tools.is_none() && self.config.is_none() && self.message_prefix.is_none()
    }

    /// Validates a delta object at `path` (e.g. `"delta"`).
    ///
    /// Rejects unknown arms and keys, `null`s, mistyped values, an object with no arm, a
    /// `tools` arm that names nothing, `insert` lines containing `'\n'`, duplicate names
    /// within `removed`, `changed`, `added` or `order`, a tool both removed and changed, and
    /// `added` indices that do not strictly increase. Whether the delta fits a base header is
    /// checked by [`apply`](Self::apply).
    pub fn from_value(v: &Value, path: &str) -> Result<HeaderDelta> {
        let f = Fields::of(v, path)?;
        if let Some(k) = f.map.keys().find(|k| !ARMS.contains(&k.as_str())) {
            return Err(Error::invalid(f.p(k), "is not a header delta arm (system, tools, config, messagePrefix)"));
        }
        let system = match f.opt_value("system")? {
            None => None,
            Some(s) => Some(system_from_value(s, &f.p("system"))?),
        };
        let tools = match f.opt_value("tools")? {
            None => None,
            Some(t) => Some(tools_from_value(t, &f.p("tools"))?),
        };
        let config = match f.opt_value("config")? {
            None => None,
            Some(c) => Some(CallConfig::from_value(c, &f.p("config"))?),
        };
        let message_prefix = match f.opt_value("messagePrefix")? {
            None => None,
            Some(p) => Some(Arc::new(Message::list_from_value(p, &f.p("messagePrefix"))?)),
        };
        let delta = HeaderDelta { system, tools, config, message_prefix };
        if delta.is_empty() {
            return Err(Error::invalid(path, "a header delta needs at least one arm (system, tools, config, messagePrefix)"));
        }
        delta.validate(path)?;
        Ok(delta)
    }

    /// The JSON value of this delta (unused arms absent; an empty delta is `{}`).
    pub fn to_value(&self) -> Value {
        let mut m = JsonMap::new();
        if let Some(s) = &self.system {
            let mut o = JsonMap::new();
            o.insert("keepLeading".into(), (s.keep_leading as u64).into());
            o.insert("keepTrailing".into(), (s.keep_trailing as u64).into());
            o.insert("insert".into(), Value::Array(s.insert.iter().map(|l| Value::String(l.clone())).collect()));
            m.insert("system".into(), Value::Object(o));
        }
        if let Some(t) = &self.tools {
            let tool_value = |t: &ToolSchema| serde_json::to_value(t).expect("a tool schema always serialises");
            let names = |n: &[String]| Value::Array(n.iter().map(|s| Value::String(s.clone())).collect());
            let mut o = JsonMap::new();
            if !t.removed.is_empty() {
                o.insert("removed".into(), names(&t.removed));
            }
            if !t.changed.is_empty() {
                o.insert("changed".into(), Value::Array(t.changed.iter().map(tool_value).collect()));
            }
            if let Some(order) = &t.order {
                o.insert("order".into(), names(order));
            }
            if !t.added.is_empty() {
                let added = t
                    .added
                    .iter()
                    .map(|a| {
                        let mut e = JsonMap::new();
                        e.insert("index".into(), (a.index as u64).into());
                        e.insert("tool".into(), tool_value(&a.tool));
                        Value::Object(e)
                    })
                    .collect();
                o.insert("added".into(), Value::Array(added));
            }
            m.insert("tools".into(), Value::Object(o));
        }
        if let Some(c) = &self.config {
            m.insert("config".into(), c.to_value());
        }
        if let Some(p) = &self.message_prefix {
            m.insert("messagePrefix".into(), Value::Array(p.iter().map(Message::to_value).collect()));
        }
        Value::Object(m)
    }

    /// Applies the delta to `base`; errors name fields under `delta.`.
    ///
    /// See [`apply_at`](Self::apply_at).
    pub fn apply(&self, base: &EpochHeader) -> Result<EpochHeader> {
        self.apply_at(base, "delta")
    }

    /// Applies the delta to `base` and returns the canonical result. Errors (kind
    /// `InvalidInput`, fields named under `path`) when the delta is malformed (as
    /// [`from_value`](Self::from_value) would reject it) or does not fit the base: the kept
    /// lines outnumber the base system prompt's lines, a removed or changed tool does not
    /// exist, `order` is not a permutation of the kept tools, an added tool's name already
    /// exists or its index is past the end of the list.
    pub fn apply_at(&self, base: &EpochHeader, path: &str) -> Result<EpochHeader> {
        self.validate(path)?;
        let system = match &self.system {
            None => base.system.clone(),
            Some(edit) => Some(apply_system(edit, base.system_str(), &join(path, "system"))?),
        };
        let tools = match &self.tools {
            None => base.tools.clone(),
            Some(edit) => Some(apply_tools(edit, base.tools_slice(), &join(path, "tools"))?),
        };
        let config = self.config.clone().unwrap_or_else(|| base.config.clone());
        let prefix = match &self.message_prefix {
            None => base.message_prefix.clone(),
            Some(p) => Some(p.clone()),
        };
        Ok(EpochHeader::canonical(config, system, tools, prefix))
    }

    /// Checks what can be checked without a base header.
    fn validate(&self, path: &str) -> Result<()> {
        if let Some(s) = &self.system {
            for (i, line) in s.insert.iter().enumerate() {
                if line.contains('\n') {
                    return Err(Error::invalid(format!("{}.insert[{i}]", join(path, "system")), "a line must not contain a newline"));
                }
            }
        }
        if let Some(t) = &self.tools {
            let p = join(path, "tools");
            let mut removed = HashSet::new();
            for (i, name) in t.removed.iter().enumerate() {
                let at = format!("{p}.removed[{i}]");
                if name.is_empty() {
                    return Err(Error::invalid(at, "must not be empty"));
                }
                if !removed.insert(name.as_str()) {
                    return Err(Error::invalid(at, format!("tool {name:?} is removed twice")));
                }
            }
            let mut changed = HashSet::new();
            for (i, tool) in t.changed.iter().enumerate() {
                let at = format!("{p}.changed[{i}].name");
                if removed.contains(tool.name.as_str()) {
                    return Err(Error::invalid(at, format!("tool {:?} is both removed and changed", tool.name)));
                }
                if !changed.insert(tool.name.as_str()) {
                    return Err(Error::invalid(at, format!("tool {:?} is changed twice", tool.name)));
                }
            }
            if let Some(order) = &t.order {
                let mut seen = HashSet::new();
                for (i, name) in order.iter().enumerate() {
                    if !seen.insert(name.as_str()) {
                        return Err(Error::invalid(format!("{p}.order[{i}]"), format!("tool {name:?} is listed twice")));
                    }
                }
            }
            let mut added = HashSet::new();
            for (i, a) in t.added.iter().enumerate() {
                if i > 0 && a.index <= t.added[i - 1].index {
                    return Err(Error::invalid(
                        format!("{p}.added[{i}].index"),
                        format!("indices must strictly increase ({} follows {})", a.index, t.added[i - 1].index),
                    ));
                }
                if !added.insert(a.tool.name.as_str()) {
                    return Err(Error::invalid(format!("{p}.added[{i}].tool.name"), format!("tool {:?} is added twice", a.tool.name)));
                }
            }
        }
        Ok(())
    }
}

fn join(path: &str, key: &str) -> String {
    crate::types::join(path, key)
}

fn apply_system(edit: &SystemEdit, base: &str, path: &str) -> Result<String> {
    let lines = system_lines(base);
    let n = lines.len();
    if edit.keep_leading > n {
        return Err(Error::invalid(
            format!("{path}.keepLeading"),
            format!("keeps {} leading lines but the base system prompt has {n}", edit.keep_leading),
        ));
    }
    if edit.keep_trailing > n - edit.keep_leading {
        return Err(Error::invalid(
            format!("{path}.keepTrailing"),
            format!(
                "keeps {} trailing lines but the base system prompt has {n} lines and {} of them are kept as leading lines",
                edit.keep_trailing, edit.keep_leading
            ),
        ));
    }
    let mut out: Vec<&str> = Vec::with_capacity(edit.keep_leading + edit.insert.len() + edit.keep_trailing);
    out.extend_from_slice(&lines[..edit.keep_leading]);
    out.extend(edit.insert.iter().map(String::as_str));
    out.extend_from_slice(&lines[n - edit.keep_trailing..]);
    Ok(out.join("\n"))
}

fn apply_tools(edit: &ToolsEdit, base: &[ToolSchema], path: &str) -> Result<Vec<ToolSchema>> {
    let mut tools = base.to_vec();
    for (i, name) in edit.removed.iter().enumerate() {
        let at = tools
            .iter()
            .position(|t| &t.name == name)
            .ok_or_else(|| Error::invalid(format!("{path}.removed[{i}]"), format!("no tool named {name:?} in the base header")))?;
        tools.remove(at);
    }
    for (i, tool) in edit.changed.iter().enumerate() {
        let slot = tools.iter_mut().find(|t| t.name == tool.name).ok_or_else(|| {
            Error::invalid(format!("{path}.changed[{i}].name"), format!("no tool named {:?} in the base header", tool.name))
        })?;
        *slot = tool.clone();
    }
    if let Some(order) = &edit.order {
        let mut reordered = Vec::with_capacity(tools.len());
        for (i, name) in order.iter().enumerate() {
            let t = tools
                .iter()
                .find(|t| &t.name == name)
                .ok_or_else(|| Error::invalid(format!("{path}.order[{i}]"), format!("{name:?} is not a kept tool of the base header")))?;
            reordered.push(t.clone());
        }
        if let Some(missing) = tools.iter().find(|t| !order.contains(&t.name)) {
            return Err(Error::invalid(
                format!("{path}.order"),
                format!("does not list kept tool {:?}; it must list every kept tool once", missing.name),
            ));
        }
        tools = reordered;
    }
    for (i, a) in edit.added.iter().enumerate() {
        if tools.iter().any(|t| t.name == a.tool.name) {
            return Err(Error::invalid(format!("{path}.added[{i}].tool.name"), format!("a tool named {:?} already exists", a.tool.name)));
        }
        if a.index > tools.len() {
            return Err(Error::invalid(
                format!("{path}.added[{i}].index"),
                format!("{} is past the end of the tool list (length {} at this point)", a.index, tools.len()),
            ));
        }
        tools.insert(a.index, a.tool.clone());
    }
    Ok(tools)
}

fn usize_at(f: &Fields<'_>, key: &str) -> Result<usize> {
    let n = f.u64(key)?;
    usize::try_from(n).map_err(|_| Error::invalid(f.p(key), format!("{n} is too large")))
}

fn names_at(v: &Value, path: &str) -> Result<Vec<String>> {
    let arr = v.as_array().ok_or_else(|| Error::invalid(path, format!("expected an array of tool names, got {}", kind_of(v))))?;
    arr.iter()
        .enumerate()
        .map(|(i, n)| match n.as_str() {
            Some("") => Err(Error::invalid(format!("{path}[{i}]"), "must not be empty")),
            Some(s) => Ok(s.to_string()),
            None => Err(Error::invalid(format!("{path}[{i}]"), format!("expected a string, got {}", kind_of(n)))),
        })
        .collect()
}

fn reject_unknown(f: &Fields<'_>, known: &[&str], what: &str) -> Result<()> {
    match f.map.keys().find(|k| !known.contains(&k.as_str())) {
        Some(k) => Err(Error::invalid(f.p(k), format!("is not a field of {what}"))),
        None => Ok(()),
    }
}

fn system_from_value(v: &Value, path: &str) -> Result<SystemEdit> {
    let f = Fields::of(v, path)?;
    reject_unknown(&f, &["keepLeading", "keepTrailing", "insert"], "a system line edit")?;
    let keep_leading = usize_at(&f, "keepLeading")?;
    let keep_trailing = usize_at(&f, "keepTrailing")?;
    let insert = f
        .array("insert")?
        .iter()
        .enumerate()
        .map(|(i, l)| {
            l.as_str()
                .map(str::to_string)
                .ok_or_else(|| Error::invalid(format!("{}[{i}]", f.p("insert")), format!("expected a string, got {}", kind_of(l))))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(SystemEdit { keep_leading, keep_trailing, insert })
}

fn tools_from_value(v: &Value, path: &str) -> Result<ToolsEdit> {
    let f = Fields::of(v, path)?;
    reject_unknown(&f, &["removed", "changed", "order", "added"], "a tools edit")?;
    let removed = match f.opt_value("removed")? {
        None => Vec::new(),
        Some(r) => names_at(r, &f.p("removed"))?,
    };
    let changed = match f.opt_value("changed")? {
        None => Vec::new(),
        Some(c) => ToolSchema::list_from_value(c, &f.p("changed"))?,
    };
    let order = match f.opt_value("order")? {
        None => None,
        Some(o) => Some(names_at(o, &f.p("order"))?),
    };
    let added = match f.opt_array("added")? {
        None => Vec::new(),
        Some(a) => a
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let at = format!("{}[{i}]", f.p("added"));
                let g = Fields::of(e, &at)?;
                reject_unknown(&g, &["index", "tool"], "an added tool")?;
                Ok(AddedTool { index: usize_at(&g, "index")?, tool: ToolSchema::from_value(g.value("tool")?, &g.p("tool"))? })
            })
            .collect::<Result<Vec<_>>>()?,
    };
    let edit = ToolsEdit { removed, changed, order, added };
    if edit.is_empty() {
        return Err(Error::invalid(path, "changes nothing (no removed, changed, order or added); omit the arm"));
    }
    Ok(edit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::header::{HeaderFold, HeaderSnapshot, SnapshotReason};
    use serde_json::json;

    fn tool(name: &str, desc: &str) -> ToolSchema {
        ToolSchema::from_value(&json!({"name":name,"description":desc,"parameters":{"type":"object"}}), "").unwrap()
    }

    fn header(system: Option<&str>, tools: &[(&str, &str)]) -> EpochHeader {
        EpochHeader::canonical(
            CallConfig::new("p", "m"),
            system.map(str::to_string),
            Some(tools.iter().map(|(n, d)| tool(n, d)).collect()),
            None,
        )
    }

    fn parse_err(v: Value) -> String {
        HeaderDelta::from_value(&v, "delta").unwrap_err().message().to_string()
    }

    fn round_trip(a: &EpochHeader, b: &EpochHeader) -> HeaderDelta {
        let d = diff(a, b);
        let got = d.apply(a).unwrap();
        assert_eq!(&got, b);
        assert_eq!(got.to_value(), b.to_value());
        if !d.is_empty() {
            assert_eq!(HeaderDelta::from_value(&d.to_value(), "delta").unwrap(), d);
        }
        d
    }

    #[test]
    fn lines_split_on_every_newline() {
        assert_eq!(system_lines(""), Vec::<&str>::new());
        assert_eq!(system_lines("a"), vec!["a"]);
        assert_eq!(system_lines("a\n"), vec!["a", ""]);
        assert_eq!(system_lines("\n"), vec!["", ""]);
        assert_eq!(system_lines("\n\n"), vec!["", "", ""]);
        assert_eq!(system_lines("a\nb"), vec!["a", "b"]);
    }

    #[test]
    fn system_arm_keeps_common_lines_and_inserts_the_rest() {
        let a = header(Some("one\ntwo\nthree\nfour"), &[]);
        let b = header(Some("one\nTWO\n2.5\nfour"), &[]);
        let d = round_trip(&a, &b);
        assert_eq!(d.to_value(), json!({"system":{"keepLeading":1,"keepTrailing":1,"insert":["TWO","2.5"]}}));
    }

    #[test]
    fn system_arm_handles_empty_and_trailing_newlines() {
        let texts = ["", "a", "a\n", "\n", "\n\n", "a\n\nb", "a\nb\n", "\na"];
        for x in texts {
            for y in texts {
                round_trip(&header(Some(x), &[]), &header(Some(y), &[]));
            }
        }
        let d = diff(&header(Some("a"), &[]), &header(Some("a\n"), &[]));
        assert_eq!(d.to_value(), json!({"system":{"keepLeading":1,"keepTrailing":0,"insert":[""]}}));
    }

    #[test]
    fn system_arm_emptying_the_prompt_makes_it_absent() {
        let a = header(Some("x\ny"), &[]);
        let d = HeaderDelta::from_value(&json!({"system":{"keepLeading":0,"keepTrailing":0,"insert":[]}}), "delta").unwrap();
        let got = d.apply(&a).unwrap();
        assert_eq!(got.system, None);
        assert_eq!(got.to_value(), json!({"config":{"provider":"p","model":"m"}}));
        // An absent system prompt has no lines: keeping one is an error.
        let d = HeaderDelta::from_value(&json!({"system":{"keepLeading":1,"keepTrailing":0,"insert":[]}}), "delta").unwrap();
        let e = d.apply(&header(None, &[])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert_eq!(e.message(), "delta.system.keepLeading: keeps 1 leading lines but the base system prompt has 0");
    }

    #[test]
    fn system_arm_that_keeps_too_much_is_rejected() {
        let d = HeaderDelta::from_value(&json!({"system":{"keepLeading":2,"keepTrailing":2,"insert":["x"]}}), "delta").unwrap();
        let e = d.apply(&header(Some("a\nb\nc"), &[])).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        assert!(e.message().starts_with("delta.system.keepTrailing: keeps 2 trailing lines"), "{}", e.message());
        assert_eq!(e.detail()["field"], "delta.system.keepTrailing");
    }

    #[test]
    fn tools_arm_covers_add_remove_change_and_reorder() {
        let a = header(None, &[("a", "1"), ("b", "1"), ("c", "1")]);
        let b = header(None, &[("n", "1"), ("c", "2"), ("a", "1")]);
        let d = round_trip(&a, &b);
        assert_eq!(
            d.to_value()["tools"],
            json!({
                "removed":["b"],
                "changed":[{"name":"c","description":"2","parameters":{"type":"object"}}],
                "order":["c","a"],
                "added":[{"index":0,"tool":{"name":"n","description":"1","parameters":{"type":"object"}}}]
            })
        );
    }

    #[test]
    fn pure_reordering_round_trips() {
        let a = header(None, &[("a", "1"), ("b", "1"), ("c", "1")]);
        let b = header(None, &[("c", "1"), ("a", "1"), ("b", "1")]);
        let d = round_trip(&a, &b);
        assert_eq!(d.to_value(), json!({"tools":{"order":["c","a","b"]}}));
    }

    #[test]
    fn removing_every_tool_makes_tools_absent() {
        let a = header(None, &[("a", "1")]);
        let b = header(None, &[]);
        let d = round_trip(&a, &b);
        assert_eq!(d.apply(&a).unwrap().tools, None);
        assert_eq!(d.to_value(), json!({"tools":{"removed":["a"]}}));
    }

    #[test]
    fn tools_arm_that_does_not_fit_is_rejected() {
        let base = header(None, &[("a", "1"), ("b", "1")]);
        let t = |n: &str| json!({"name":n,"description":"d","parameters":{}});
        let cases = [
            (json!({"removed":["z"]}), "delta.tools.removed[0]: no tool named \"z\" in the base header"),
            (json!({"changed":[t("z")]}), "delta.tools.changed[0].name: no tool named \"z\" in the base header"),
            (json!({"added":[{"index":0,"tool":t("a")}]}), "delta.tools.added[0].tool.name: a tool named \"a\" already exists"),
            (
                json!({"added":[{"index":3,"tool":t("z")}]}),
                "delta.tools.added[0].index: 3 is past the end of the tool list (length 2 at this point)",
            ),
            (json!({"order":["a","z"]}), "delta.tools.order[1]: \"z\" is not a kept tool of the base header"),
            (json!({"order":["a"]}), "delta.tools.order: does not list kept tool \"b\"; it must list every kept tool once"),
            (json!({"removed":["a"],"order":["a","b"]}), "delta.tools.order[0]: \"a\" is not a kept tool of the base header"),
        ];
        for (arm, want) in cases {
            let d = HeaderDelta::from_value(&json!({ "tools": arm }), "delta").unwrap();
            let e = d.apply(&base).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            assert_eq!(e.message(), want);
        }
    }

    #[test]
    fn removing_then_adding_a_name_is_allowed() {
        let base = header(None, &[("a", "1"), ("b", "1")]);
        let d = HeaderDelta::from_value(
            &json!({"tools":{"removed":["a"],"added":[{"index":1,"tool":{"name":"a","description":"2","parameters":{}}}]}}),
            "delta",
        )
        .unwrap();
        let got = d.apply(&base).unwrap();
        let names: Vec<&str> = got.tools_slice().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(got.tools_slice()[1].description.as_deref(), Some("2"));
    }

    #[test]
    fn config_arm_replaces_the_whole_config() {
        let a = header(Some("s"), &[]);
        let mut b = a.clone();
        b.config = CallConfig::from_value(&json!({"provider":"q","model":"n","maxTokens":5}), "").unwrap();
        let d = round_trip(&a, &b);
        assert_eq!(d.to_value(), json!({"config":{"provider":"q","model":"n","maxTokens":5}}));
        let e = parse_err(json!({"config":{"provider":"q"}}));
        assert_eq!(e, "delta.config.model: is required");
    }

    #[test]
    fn prefix_arm_replaces_and_empty_array_means_absent() {
        let a = header(None, &[]);
        let mut b = a.clone();
        b.message_prefix = Some(Arc::new(vec![Message::user_text("hello")]));
        let d = round_trip(&a, &b);
        assert_eq!(d.to_value(), json!({"messagePrefix":[{"role":"user","content":[{"type":"text","text":"hello"}]}]}));
        let back = round_trip(&b, &a);
        assert_eq!(back.to_value(), json!({"messagePrefix":[]}));
        assert_eq!(back.apply(&b).unwrap().message_prefix, None);
    }

    #[test]
    fn writer_never_writes_the_prefix_arm() {
        let a = header(Some("s"), &[("a", "1")]);
        let mut b = header(Some("t"), &[("a", "1")]);
        let d = diff_for_writer(&a, &b).unwrap();
        assert_eq!(d.to_value(), json!({"system":{"keepLeading":0,"keepTrailing":0,"insert":["t"]}}));
        assert!(!needs_snapshot(&a, &b));
        b.message_prefix = Some(Arc::new(vec![Message::user_text("p")]));
        assert!(needs_snapshot(&a, &b));
        assert_eq!(diff_for_writer(&a, &b), None);
        // Equal headers: an empty delta, which a writer does not write.
        assert!(diff_for_writer(&a, &a).unwrap().is_empty());
        // A non-canonical empty prefix equals an absent one.
        let mut c = a.clone();
        c.message_prefix = Some(Arc::new(Vec::new()));
        assert!(diff(&a, &c).is_empty());
    }

    #[test]
    fn equal_headers_give_an_empty_delta_and_empty_delta_is_identity() {
        let a = header(Some("x\n"), &[("a", "1")]);
        let d = diff(&a, &a.clone());
        assert!(d.is_empty());
        assert_eq!(d.to_value(), json!({}));
        assert_eq!(HeaderDelta::default().apply(&a).unwrap(), a);
    }

    #[test]
    fn malformed_deltas_are_rejected_with_the_field_named() {
        let t = |n: &str| json!({"name":n,"description":"d","parameters":{}});
        let cases = [
            (json!({}), "delta: a header delta needs at least one arm (system, tools, config, messagePrefix)"),
            (json!([]), "delta: expected an object, got an array"),
            (json!({"bogus":1}), "delta.bogus: is not a header delta arm (system, tools, config, messagePrefix)"),
            (json!({"system":null}), "delta.system: is null; optional fields must be absent, not null"),
            (
                json!({"system":{"keepLeading":-1,"keepTrailing":0,"insert":[]}}),
                "delta.system.keepLeading: expected a non-negative integer, got -1",
            ),
            (
                json!({"system":{"keepLeading":0,"keepTrailing":1.5,"insert":[]}}),
                "delta.system.keepTrailing: expected a non-negative integer, got 1.5",
            ),
            (json!({"system":{"keepLeading":0,"keepTrailing":0}}), "delta.system.insert: is required"),
            (json!({"system":{"keepLeading":0,"keepTrailing":0,"insert":[3]}}), "delta.system.insert[0]: expected a string, got a number"),
            (
                json!({"system":{"keepLeading":0,"keepTrailing":0,"insert":["a\nb"]}}),
                "delta.system.insert[0]: a line must not contain a newline",
            ),
            (
                json!({"system":{"keepLeading":0,"keepTrailing":0,"insert":[],"x":1}}),
                "delta.system.x: is not a field of a system line edit",
            ),
            (json!({"tools":{}}), "delta.tools: changes nothing (no removed, changed, order or added); omit the arm"),
            (json!({"tools":{"removed":[]}}), "delta.tools: changes nothing (no removed, changed, order or added); omit the arm"),
            (json!({"tools":{"renamed":[]}}), "delta.tools.renamed: is not a field of a tools edit"),
            (json!({"tools":{"removed":"a"}}), "delta.tools.removed: expected an array of tool names, got a string"),
            (json!({"tools":{"removed":[""]}}), "delta.tools.removed[0]: must not be empty"),
            (json!({"tools":{"removed":["a","a"]}}), "delta.tools.removed[1]: tool \"a\" is removed twice"),
            (json!({"tools":{"changed":[t("a"),t("a")]}}), "delta.tools.changed[1].name: duplicate tool name \"a\""),
            (json!({"tools":{"removed":["a"],"changed":[t("a")]}}), "delta.tools.changed[0].name: tool \"a\" is both removed and changed"),
            (json!({"tools":{"order":["a","a"]}}), "delta.tools.order[1]: tool \"a\" is listed twice"),
            (
                json!({"tools":{"added":[{"index":1,"tool":t("a")},{"index":1,"tool":t("b")}]}}),
                "delta.tools.added[1].index: indices must strictly increase (1 follows 1)",
            ),
            (
                json!({"tools":{"added":[{"index":0,"tool":t("a")},{"index":1,"tool":t("a")}]}}),
                "delta.tools.added[1].tool.name: tool \"a\" is added twice",
            ),
            (json!({"tools":{"added":[{"tool":t("a")}]}}), "delta.tools.added[0].index: is required"),
            (json!({"tools":{"added":[{"index":0,"tool":t("a"),"at":0}]}}), "delta.tools.added[0].at: is not a field of an added tool"),
            (
                json!({"tools":{"added":[{"index":0,"tool":{"name":"a","description":"d"}}]}}),
                "delta.tools.added[0].tool.parameters: is required",
            ),
            (json!({"messagePrefix":{}}), "delta.messagePrefix: expected an array of messages, got an object"),
            (json!({"messagePrefix":[{"role":"user"}]}), "delta.messagePrefix[0].content: is required"),
        ];
        for (v, want) in cases {
            let e = HeaderDelta::from_value(&v, "delta").unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidInput, "{v}");
            assert_eq!(e.message(), want, "{v}");
        }
    }

    #[test]
    fn programmatic_delta_with_a_newline_line_is_rejected_by_apply() {
        let d = HeaderDelta {
            system: Some(SystemEdit { keep_leading: 0, keep_trailing: 0, insert: vec!["a\nb".into()] }),
            ..HeaderDelta::default()
        };
        let e = d.apply(&header(None, &[])).unwrap_err();
        assert_eq!(e.message(), "delta.system.insert[0]: a line must not contain a newline");
    }

    #[test]
    fn fold_rejects_a_delta_before_any_snapshot_as_corrupt_log() {
        let fold = HeaderFold::default();
        let d = diff(&header(None, &[]), &header(Some("s"), &[]));
        let e = fold.check_delta(&d).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::CorruptLog);
        assert_eq!(e.detail()["field"], "data");
        assert!(e.message().contains("before any request/header snapshot"), "{}", e.message());
    }

    #[test]
    fn fold_applies_deltas_onto_the_latest_snapshot() {
        let a = header(Some("one\ntwo"), &[("a", "1")]);
        let b = header(Some("one\n2"), &[("b", "1"), ("a", "1")]);
        let c = header(Some("one\n2\n"), &[("a", "2")]);
        let mut fold = HeaderFold::default();
        fold.apply_snapshot(0, &HeaderSnapshot { header: a.clone(), reason: SnapshotReason::Initial, instance: 1 });
        for (seq, (from, to)) in [(&a, &b), (&b, &c)].into_iter().enumerate() {
            let d = diff_for_writer(from, to).unwrap();
            let data = crate::header::delta_event_data(&d, 1);
            let (parsed, instance) = crate::header::delta_from_event_data(&data, "data").unwrap();
            assert_eq!(instance, 1);
            let next = fold.check_delta(&parsed).unwrap();
            fold.apply_delta(seq as u64 + 1, instance, next);
        }
        assert_eq!(fold.current(), Some(&c));
        assert_eq!(fold.last_seq(), Some(2));
        // A delta that does not fit the folded header is refused and changes nothing.
        let bad = HeaderDelta::from_value(&json!({"tools":{"removed":["b"]}}), "delta").unwrap();
        let e = fold.check_delta(&bad).unwrap_err();
        assert_eq!(e.message(), "delta.tools.removed[0]: no tool named \"b\" in the base header");
        assert_eq!(fold.current(), Some(&c));
    }
}
