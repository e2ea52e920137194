// A C++ runner for the shared scenario files (tests/scenarios/*.json), through llmsession.hpp.
// The format is specified in docs/scenarios.md; tests/scenarios.rs is the Rust runner this
// one follows op for op.
#pragma once

#include "golden.hpp"
#include "llmsession.hpp"

#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdlib>
#include <unistd.h>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace scenario {

using json = nlohmann::json;

/// A failed expectation (the runner's own error, unlike llmsession::Error).
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string &why) { throw Failure(why); }

/// The value at a JSON Pointer (RFC 6901), or nullptr.
inline const json *pointer(const json &doc, const std::string &ptr) {
    if (ptr.empty()) {
        return &doc;
    }
    if (ptr[0] != '/') {
        return nullptr;
    }
    const json *cur = &doc;
    std::size_t pos = 1;
    while (true) {
        std::size_t next = ptr.find('/', pos);
        std::string tok = ptr.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
        std::string key;
        for (std::size_t i = 0; i < tok.size(); ++i) {
            if (tok[i] == '~' && i + 1 < tok.size()) {
                key += tok[i + 1] == '1' ? '/' : '~';
                ++i;
            } else {
                key += tok[i];
            }
        }
        if (cur->is_object()) {
            auto it = cur->find(key);
            if (it == cur->end()) {
                return nullptr;
            }
            cur = &*it;
        } else if (cur->is_array()) {
            if (key.empty() || key.find_first_not_of("0123456789") != std::string::npos ||
                (key.size() > 1 && key[0] == '0')) {
                return nullptr;
            }
            std::size_t i = std::stoul(key);
            if (i >= cur->size()) {
                return nullptr;
            }
            cur = &(*cur)[i];
        } else {
            return nullptr;
        }
        if (next == std::string::npos) {
            return cur;
        }
        pos = next + 1;
    }
}

/// A value shortened for a message.
inline std::string clip(const std::string &s) {
    if (s.size() <= 300) {
        return s;
    }
    return s.substr(0, 300) + "... (" + std::to_string(s.size()) + " bytes)";
}

/// Equality, or a matcher object `{"$contains"|"$absent"|"$gt"|"$lt": ...}`.
inline bool matches(const json *got, const json &want) {
    if (want.is_object() && !want.empty()) {
        bool all_dollar = true;
        for (auto it = want.begin(); it != want.end(); ++it) {
            all_dollar = all_dollar && !it.key().empty() && it.key()[0] == '$';
        }
        if (all_dollar) {
            for (auto it = want.begin(); it != want.end(); ++it) {
                const json &arg = it.value();
                const std::string &k = it.key();
                bool ok = false;
                if (k == "$contains") {
                    ok = got && got->is_string() && arg.is_string() &&
                         got->get<std::string>().find(arg.get<std::string>()) != std::string::npos;
                } else if (k == "$absent") {
                    bool absent = arg.is_boolean() ? arg.get<bool>() : true;
                    ok = (got == nullptr) == absent;
                } else if (k == "$gt") {
                    ok = got && got->is_number() && arg.is_number() &&
                         got->get<double>() > arg.get<double>();
                } else if (k == "$lt") {
                    ok = got && got->is_number() && arg.is_number() &&
                         got->get<double>() < arg.get<double>();
                }
                if (!ok) {
                    return false;
                }
            }
            return true;
        }
    }
    return got != nullptr && *got == want;
}

inline void check_pointers(const std::string &what, const json &doc, const json &ptrs) {
    if (!ptrs.is_object()) {
        return;
    }
    for (auto it = ptrs.begin(); it != ptrs.end(); ++it) {
        const json *got = pointer(doc, it.key());
        if (!matches(got, it.value())) {
            fail(what + ": at " + it.key() + ": expected " + it.value().dump() + ", got " +
                 (got ? clip(got->dump()) : "(absent)"));
        }
    }
}

/// Expands `{"$repeat": text, "times": n}` everywhere.
inline void expand(json &v) {
    if (v.is_object() && v.contains("$repeat")) {
        std::string text = v["$repeat"].get<std::string>();
        std::size_t n = v.at("times").get<std::size_t>();
        std::string out;
        out.reserve(text.size() * n);
        for (std::size_t i = 0; i < n; ++i) {
            out += text;
        }
        v = out;
    } else if (v.is_object() || v.is_array()) {
        for (auto &x : v) {
            expand(x);
        }
    }
}

inline std::string err_str(const llmsession::Error &e) {
    return std::string("[") + e.kind() + "] " + e.message();
}

inline bool times_ok(const json &spec, std::size_t calls) {
    auto it = spec.find("times");
    return it == spec.end() || !it->is_number_unsigned() || calls < it->get<std::size_t>();
}

inline json user_message(const json &v) {
    if (v.is_string()) {
        return json{{"role", "user"}, {"content", json::array({{{"type", "text"}, {"text", v}}})}};
    }
    return v;
}

inline std::string str_or(const json &o, const char *key, const std::string &dflt) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : dflt;
}

inline bool bool_or(const json &o, const char *key, bool dflt) {
    auto it = o.find(key);
    return it != o.end() && it->is_boolean() ? it->get<bool>() : dflt;
}

inline const json &get_or_null(const json &o, const char *key) {
    static const json null;
    if (!o.is_object()) {
        return null;
    }
    auto it = o.find(key);
    return it == o.end() ? null : *it;
}

/// The event appending `message` as context from `source` (`host` or `plugin`).
inline std::string context_event(const json &message, const char *source) {
    return json{{"type", "user/message"},
                {"data", {{"message", message}, {"source", source}}},
                {"surfaceOp", "append"}}
        .dump();
}

struct ListenerState {
    std::size_t index = 0;  // its position among the listeners (or pre-step listeners)
    json spec;
    std::atomic<std::size_t> calls{0};
    std::mutex mutex;
    json held = json::array();
};

struct SummaryCall {
    json input;        // the whole summariser input
    std::string text;  // the request envelope, serialised
    std::size_t shared_messages = 0;
};

/// A temporary directory for the logs `load` opens, removed with everything in it (the cut
/// records' sidecars included).
struct TempDir {
    std::string path;
    TempDir() {
        const char *dir = std::getenv("TMPDIR");
        std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/llmsession-cpp-load-XXXXXX";
        std::vector<char> buf(tmpl.begin(), tmpl.end());
        buf.push_back('\0');
        if (::mkdtemp(buf.data()) == nullptr) {
            fail("cannot create a temporary directory");
        }
        path = buf.data();
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
    TempDir(const TempDir &) = delete;
    TempDir &operator=(const TempDir &) = delete;
};

struct World;
void new_agent(World &w);

struct World {
    std::optional<llmsession::Session> session;
    std::optional<llmsession::Agent> agent;
    json options;  // agent options without the policy
    std::vector<std::shared_ptr<ListenerState>> listeners;
    std::vector<std::shared_ptr<ListenerState>> pre_steps;
    std::mutex seen_mutex;
    std::vector<json> pre_step_seen;
    std::vector<SummaryCall> summaries;
    json summariser;  // spec (null: fixed)
    json policy;      // null: none
    std::vector<json> requests;
    std::vector<std::size_t> request_marks;
    std::optional<json> last_request;
    std::shared_ptr<llmsession::Cancel> cancel = std::make_shared<llmsession::Cancel>();
    json counter;  // the host token counter's spec (counter, setCounter); null: the estimate
    std::atomic<bool> disposed{false};  // a callback disposed the instance during the running op
    std::unique_ptr<TempDir> dir;  // where load writes the logs it opens
    std::size_t loads = 0;
    json calls = json::array();     // what the fakes received since the previous op (seen_mutex)
    std::size_t counter_calls = 0;  // items the token counter counted since the previous op
    json out = json::object();      // the running op's transcript entry

    llmsession::Agent &live_agent() {
        if (!agent) {
            fail("no live agent (disposed?)");
        }
        return *agent;
    }

    json events() const { return json::parse(session->events()); }

    /// Records a fake's call for the running op's transcript entry.
    void journal(json call) {
        std::lock_guard<std::mutex> lock(seen_mutex);
        calls.push_back(std::move(call));
    }
};

inline void set_listeners(World &w, const json &listeners, const json &pre) {
    auto mk = [](const json &v, std::size_t index) {
        auto st = std::make_shared<ListenerState>();
        st->index = index;
        st->spec = v;
        if (v.contains("messages")) {
            st->held = v["messages"];
        }
        return st;
    };
    if (listeners.is_array()) {
        w.listeners.clear();
        for (const auto &l : listeners) {
            w.listeners.push_back(mk(l, w.listeners.size()));
        }
    }
    if (pre.is_array()) {
        w.pre_steps.clear();
        for (const auto &l : pre) {
            w.pre_steps.push_back(mk(l, w.pre_steps.size()));
        }
    }
}

inline llmsession::Callback prefix_listener(World &w, std::shared_ptr<ListenerState> st) {
    World *wp = &w;
    return [wp, st](std::string_view in, llmsession::Reply &reply) {
        wp->journal({{"callback", "prefix"}, {"listener", st->index}, {"input", json::parse(in)}});
        std::size_t n = st->calls.fetch_add(1);
        bool active = times_ok(st->spec, n);
        std::string kind = str_or(st->spec, "kind", "delegate");
        json rest = json::parse(in).at("rest");
        json held;
        {
            std::lock_guard<std::mutex> lock(st->mutex);
            held = st->held;
        }
        auto prepend = [&] {
            json out = held;
            for (auto &m : rest) {
                out.push_back(m);
            }
            return out;
        };
        if (kind == "prepend") {
            reply.complete(prepend().dump());
        } else if (kind == "append") {
            json out = rest;
            for (auto &m : held) {
                out.push_back(m);
            }
            reply.complete(out.dump());
        } else if (kind == "delegate") {
            reply.complete(rest.dump());
        } else if (kind == "fail" && active) {
            reply.fail(str_or(st->spec, "message", "listener failed"));
        } else if (kind == "invalid" && active) {
            reply.complete(get_or_null(st->spec, "output").dump());
        } else if (kind == "cancel" && active) {
            wp->cancel->trip();
            reply.complete(prepend().dump());
        } else if (kind == "dispose" && active) {
            wp->disposed = true;
            wp->agent->dispose();
            reply.complete(rest.dump());
        } else if (kind == "append-event") {
            if (active) {
                for (const auto &m : get_or_null(st->spec, "events")) {
                    wp->session->append(context_event(m, "plugin"));
                }
            }
            reply.complete(prepend().dump());
        } else {
            reply.complete(prepend().dump());
        }
    };
}

inline llmsession::Callback pre_step_listener(World &w, std::shared_ptr<ListenerState> st) {
    World *wp = &w;
    return [wp, st](std::string_view in, llmsession::Reply &reply) {
        std::size_t n = st->calls.fetch_add(1);
        bool active = times_ok(st->spec, n);
        {
            std::lock_guard<std::mutex> lock(wp->seen_mutex);
            wp->pre_step_seen.push_back(json::parse(in));
        }
        wp->journal({{"callback", "preStep"}, {"listener", st->index}, {"input", json::parse(in)}});
        std::string kind = str_or(st->spec, "kind", "record");
        if (kind == "inject" && active) {
            for (const auto &m : get_or_null(st->spec, "messages")) {
                wp->session->append(context_event(m, "plugin"));
            }
        } else if (kind == "fail" && active) {
            reply.fail("pre-step failed");
            return;
        } else if (kind == "cancel" && active) {
            wp->cancel->trip();
        } else if (kind == "dispose" && active) {
            wp->disposed = true;
            wp->agent->dispose();
        }
        reply.complete("null");
    };
}

inline llmsession::Callback summariser(World &w, json spec) {
    World *wp = &w;
    auto calls = std::make_shared<std::atomic<std::size_t>>(0);
    return [wp, spec, calls](std::string_view in, llmsession::Reply &reply) {
        json input = json::parse(in);
        {
            std::lock_guard<std::mutex> lock(wp->seen_mutex);
            wp->summaries.push_back(
                SummaryCall{input, input.at("request").dump(),
                            input.at("sharedMessages").get<std::size_t>()});
        }
        // The envelope is spliced into the input as its exact bytes, before "provider".
        std::size_t bytes = in.rfind(",\"provider\":") - std::string_view("{\"request\":").size();
        json rec = json::object();
        for (const char *k : {"digest", "provider", "model", "maxTokens", "sharedMessages", "prefixLen"}) {
            rec[k] = get_or_null(input, k);
        }
        rec["bytes"] = bytes;
        rec["messageCount"] = input.at("request").at("messages").size();
        wp->journal({{"callback", "summariser"}, {"input", rec}});
        std::size_t n = calls->fetch_add(1);
        bool active = times_ok(spec, n);
        json ok = {{"text", str_or(spec, "text", "Summary of the work so far.")}};
        if (spec.contains("usage")) {
            ok["usage"] = spec["usage"];
        }
        std::string kind = str_or(spec, "kind", "fixed");
        if (kind == "fail" && active) {
            reply.fail("summariser unavailable");
            return;
        } else if (kind == "empty" && active) {
            ok["text"] = "   ";
        } else if (kind == "truncated" && active) {
            ok["truncated"] = true;
        } else if (kind == "long" && active) {
            std::string s;
            for (int i = 0; i < 20000; ++i) {
                s += "very long summary ";
            }
            ok["text"] = s;
        } else if (kind == "cancel" && active) {
            wp->cancel->trip();
            reply.fail("cancelled");
            return;
        } else if (kind == "append-during" && active) {
            for (const auto &m : get_or_null(spec, "messages")) {
                wp->session->append(context_event(m, "host"));
            }
        } else if (kind == "dispose" && active) {
            wp->disposed = true;
            wp->agent->dispose();
        }
        reply.complete(ok.dump());
    };
}

/// The characters (code points) of every string in `v` (object keys left out).
inline std::size_t string_chars(const json &v) {
    if (v.is_string()) {
        std::size_t n = 0;
        for (unsigned char c : v.get_ref<const std::string &>()) {
            n += (c & 0xC0) != 0x80 ? 1 : 0;
        }
        return n;
    }
    std::size_t n = 0;
    if (v.is_array() || v.is_object()) {
        for (const auto &x : v) {
            n += string_chars(x);
        }
    }
    return n;
}

/// A host token counter (docs/scenarios.md, "Token counters").
inline llmsession::Callback token_counter(World &w, json spec) {
    World *wp = &w;
    auto calls = std::make_shared<std::atomic<std::size_t>>(0);
    return [wp, spec, calls](std::string_view in, llmsession::Reply &reply) {
        {
            std::lock_guard<std::mutex> lock(wp->seen_mutex);
            ++wp->counter_calls;
        }
        std::size_t n = calls->fetch_add(1);
        bool active = times_ok(spec, n);
        std::size_t per = 4;
        auto it = spec.find("perToken");
        if (it != spec.end() && it->is_number_unsigned() && it->get<std::size_t>() >= 1) {
            per = it->get<std::size_t>();
        }
        std::size_t count = (string_chars(json::parse(in)) + per - 1) / per;
        std::string kind = str_or(spec, "kind", "chars");
        if (kind == "fail" && active) {
            reply.fail("token counter failed");
            return;
        } else if (kind == "append-during" && active) {
            for (const auto &m : get_or_null(spec, "messages")) {
                wp->session->append(context_event(m, "host"));
            }
        } else if (kind == "dispose" && active) {
            wp->disposed = true;
            wp->agent->dispose();
        }
        reply.complete(std::to_string(count));
    };
}

inline void new_agent(World &w) {
    llmsession::Agent agent(*w.session, w.options.dump());
    for (auto &l : w.listeners) {
        agent.add_prefix_listener(prefix_listener(w, l));
    }
    for (auto &l : w.pre_steps) {
        agent.add_pre_step_listener(pre_step_listener(w, l));
    }
    if (!w.policy.is_null()) {
        agent.set_policy(w.policy.dump());
    }
    agent.set_summariser(summariser(w, w.summariser.is_null() ? json{{"kind", "fixed"}} : w.summariser));
    if (!w.counter.is_null()) {
        agent.set_token_counter(token_counter(w, w.counter));
    }
    w.agent.emplace(std::move(agent));
}

/// The op's outcome for its transcript entry: `"ok"`, or `"error"` with `{kind, field?, message}`.
inline void record_outcome(World &w, const std::optional<llmsession::Error> &error) {
    w.out["outcome"] = error ? "error" : "ok";
    if (error) {
        json e = {{"kind", error->kind()}, {"message", error->message()}};
        json detail = json::parse(error->detail());
        if (detail.is_object() && detail.contains("field") && !detail["field"].is_null()) {
            e["field"] = detail["field"];
        }
        w.out["error"] = e;
    }
}

/// Checks an op's outcome against its `expectError`. `error` is the failure, if any.
inline void check_error(World &w, const json &op, const std::optional<llmsession::Error> &error) {
    record_outcome(w, error);
    auto it = op.find("expectError");
    if (it == op.end()) {
        if (error) {
            fail("unexpected error: " + err_str(*error));
        }
        return;
    }
    if (!error) {
        fail("expected an error " + it->dump() + ", got success");
    }
    std::string kind = str_or(*it, "kind", "");
    if (!kind.empty() && kind != error->kind()) {
        fail("expected error kind " + kind + ", got " + err_str(*error));
    }
    std::string contains = str_or(*it, "contains", "");
    if (!contains.empty() && error->message().find(contains) == std::string::npos) {
        fail("expected the error message to contain \"" + contains + "\", got " + err_str(*error));
    }
}

/// Runs `f`, returning the llmsession::Error it threw, if any.
template <class F> std::optional<llmsession::Error> attempt(F &&f) {
    try {
        f();
        return std::nullopt;
    } catch (const llmsession::Error &e) {
        return e;
    }
}

inline json messages_of(const json &req) {
    const json &m = get_or_null(req, "messages");
    return m.is_array() ? m : json::array();
}

inline bool is_prefix_of(const json &shorter, const json &longer) {
    if (shorter.size() > longer.size()) {
        return false;
    }
    for (std::size_t i = 0; i < shorter.size(); ++i) {
        if (shorter[i].dump() != longer[i].dump()) {
            return false;
        }
    }
    return true;
}

inline void check_request(const json &req, const std::optional<json> &prev, const json &exp) {
    check_pointers("request", req, get_or_null(exp, "pointers"));
    if (exp.contains("equals") && exp["equals"] != req) {
        fail("request differs:\n  expected " + exp["equals"].dump() + "\n  got      " + req.dump());
    }
    if (exp.contains("messageCount")) {
        std::size_t n = exp["messageCount"].get<std::size_t>();
        std::size_t got = messages_of(req).size();
        if (got != n) {
            fail("expected " + std::to_string(n) + " messages, got " + std::to_string(got) + ": " +
                 clip(req["messages"].dump()));
        }
    }
    for (const auto &p : get_or_null(exp, "absent")) {
        const json *got = pointer(req, p.get<std::string>());
        if (got) {
            fail("expected " + p.get<std::string>() + " to be absent, got " + clip(got->dump()));
        }
    }
    if (exp.contains("historyExcludes")) {
        std::size_t plen = exp.value("prefixLen", std::size_t(0));
        json msgs = messages_of(req);
        std::string hist;
        for (std::size_t i = plen; i < msgs.size(); ++i) {
            hist += msgs[i].dump();
        }
        for (const auto &t : exp["historyExcludes"]) {
            if (hist.find(t.get<std::string>()) != std::string::npos) {
                fail("history contains " + t.dump());
            }
        }
    }
    if (bool_or(exp, "extendsPrevious", false)) {
        if (!prev) {
            fail("extendsPrevious: there is no previous request");
        }
        for (const char *k : {"provider", "model", "system", "tools", "temperature", "maxTokens",
                              "reasoningEffort", "stop"}) {
            if (get_or_null(*prev, k) != get_or_null(req, k) || prev->contains(k) != req.contains(k)) {
                fail(std::string("extendsPrevious: field ") + k + " differs");
            }
        }
        json a = messages_of(*prev), b = messages_of(req);
        if (!is_prefix_of(a, b)) {
            fail("extendsPrevious: the previous request's " + std::to_string(a.size()) +
                 " messages are not a prefix of this one's " + std::to_string(b.size()));
        }
    }
}

inline void run_request(World &w, const json &op) {
    if (bool_or(op, "cancelled", false)) {
        w.cancel = std::make_shared<llmsession::Cancel>();
        w.cancel->trip();
    } else {
        w.cancel = std::make_shared<llmsession::Cancel>();
    }
    auto cancel = w.cancel;
    std::string env;
    auto error = attempt([&] { env = w.live_agent().next_request(cancel.get()); });
    if (!error) {
        json v = json::parse(env);
        json info = json::parse(w.agent->request_info());
        w.out["request"] = info;
        json exp = get_or_null(op, "expect");
        if (exp.contains("prefixLen") && info["prefixLen"] != exp["prefixLen"]) {
            fail("expected prefixLen " + exp["prefixLen"].dump() + ", got " + info["prefixLen"].dump());
        }
        if (exp.contains("sharedMessages") && info["sharedMessages"] != exp["sharedMessages"]) {
            fail("expected sharedMessages " + exp["sharedMessages"].dump() + ", got " +
                 info["sharedMessages"].dump());
        }
        check_request(v, w.last_request, exp);
        w.requests.push_back(v);
        {
            std::lock_guard<std::mutex> lock(w.seen_mutex);
            w.request_marks.push_back(w.summaries.size());
        }
        w.last_request = v;
    } else if (error->status() == LLS_ERR_DISPOSED) {
        w.agent.reset();
    }
    check_error(w, op, error);
}

inline void dispose_agent(World &w) {
    if (w.agent) {
        w.agent->dispose();
        w.agent.reset();
    }
}

/// The stored records of a session (its exported JSONL, one record per line, bytes kept).
inline std::vector<std::string> stored_records(const llmsession::Session &s) {
    std::vector<std::string> out;
    std::string text = s.export_jsonl();
    std::size_t start = 0;
    for (std::size_t i = 0; i < text.size(); ++i) {
        if (text[i] == '\n') {
            out.push_back(text.substr(start, i - start));
            start = i + 1;
        }
    }
    return out;
}

/// A session reopened from its serialised log, through a host store held in memory (a
/// conditional, all-or-nothing store as a database would be).
inline llmsession::Session reload(const llmsession::Session &s) {
    auto records = std::make_shared<std::vector<std::string>>(stored_records(s));
    return llmsession::Session::open_store(
        std::function<std::string(std::string_view)>([records](std::string_view in) {
            json req = json::parse(in);
            std::string op = req.at("op");
            if (op == "load") {
                return json{{"records", *records}}.dump();
            } else if (op == "append") {
                bool create = req.contains("header");
                if (create != records->empty() ||
                    (!records->empty() && req.at("seq").get<std::size_t>() != records->size() - 1)) {
                    return std::string(R"({"conflict":"seq is not the next one"})");
                }
                if (create) {
                    records->push_back(req.at("header").get<std::string>());
                }
                for (const auto &r : req.at("records")) {
                    records->push_back(r.get<std::string>());
                }
            } else if (op == "undo") {
                records->resize(std::min(records->size(), req.at("from").get<std::size_t>()));
            } else if (op == "cut") {
                records->resize(std::min(records->size(), req.at("keep").get<std::size_t>()));
            }
            return std::string("true");
        }));
}

void expect_log(World &w, const json &op);
void expect_summary(World &w, const json &op);

/// The stored records of a session: its header record, then every event's record, byte for
/// byte (one event at a time, so that no record is parsed and written again).
inline std::vector<std::string> raw_records(const llmsession::Session &s) {
    std::vector<std::string> records{s.info()};
    std::size_t n = json::parse(s.events()).size();
    for (std::size_t i = 0; i < n; ++i) {
        std::string one = s.events(i, i + 1);  // "[record]"
        records.push_back(one.substr(1, one.size() - 2));
    }
    return records;
}

/// `load`: reopens the session from a log file written from the op's records, or the current
/// log's, changed as the op says (docs/scenarios.md, "Loading a log").
inline void load(World &w, const json &op) {
    std::vector<std::string> records;
    if (op.contains("records")) {
        if (!op["records"].is_array()) {
            fail("load: records must be an array");
        }
        for (const auto &r : op["records"]) {
            records.push_back(r.is_string() ? r.get<std::string>() : r.dump());
        }
    } else {
        records = raw_records(*w.session);
    }
    if (op.contains("dropLast")) {
        std::size_t n = op["dropLast"].get<std::size_t>();
        records.resize(records.size() > n ? records.size() - n : 0);
    }
    for (const auto &e : get_or_null(op, "edit")) {
        std::string from = str_or(e, "replace", ""), to = str_or(e, "with", "");
        long i = -1;
        if (e.contains("record")) {
            i = e["record"].get<long>();
            if (i < 0) {
                i += static_cast<long>(records.size());
            }
        } else {
            for (long j = static_cast<long>(records.size()) - 1; j >= 0; --j) {
                if (records[j].find(from) != std::string::npos) {
                    i = j;
                    break;
                }
            }
        }
        if (i < 0 || i >= static_cast<long>(records.size())) {
            fail("load: there is no record " + std::to_string(i) + " to edit");
        }
        std::size_t at = records[i].find(from);
        if (at == std::string::npos) {
            fail("load: record " + std::to_string(i) + " does not contain \"" + from + "\"");
        }
        records[i].replace(at, from.size(), to);
    }
    dispose_agent(w);
    if (!w.dir) {
        w.dir = std::make_unique<TempDir>();
    }
    std::string path = w.dir->path + "/load-" + std::to_string(++w.loads) + ".jsonl";
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        for (const auto &r : records) {
            f << r << '\n';
        }
        f << str_or(op, "tail", "");
    }
    std::optional<llmsession::Session> opened;
    auto error = attempt([&] { opened.emplace(llmsession::Session::open_file(path)); });
    if (opened) {
        w.out["loadReport"] = json::parse(opened->load_report());
        check_pointers("load report", json::parse(opened->load_report()), get_or_null(op, "expectReport"));
        w.session.emplace(std::move(*opened));
        w.last_request.reset();
    }
    // On a failed open the session stays the one before; a new instance drives it.
    new_agent(w);
    check_error(w, op, error);
}

inline void run_op_inner(World &w, const json &op);

/// Runs one op; an instance a callback disposed during it is dropped afterwards.
inline void run_op(World &w, const json &op) {
    struct DropDisposed {
        World &w;
        ~DropDisposed() {
            if (w.disposed.exchange(false)) {
                w.agent.reset();
            }
        }
    } drop{w};
    run_op_inner(w, op);
}

inline void run_op_inner(World &w, const json &op) {
    std::string name = str_or(op, "op", "");
    if (name == "turn") {
        check_error(w, op, attempt([&] { w.live_agent().start_turn(user_message(op.at("user")).dump()); }));
    } else if (name == "request") {
        run_request(w, op);
    } else if (name == "respond") {
        json msg;
        if (op.contains("message")) {
            msg = op["message"];
        } else {
            json content = json::array();
            if (op.contains("text") && op["text"].is_string()) {
                content.push_back({{"type", "text"}, {"text", op["text"]}});
            }
            for (const auto &c : get_or_null(op, "toolCalls")) {
                content.push_back({{"type", "tool-call"},
                                   {"id", c.at("id")},
                                   {"name", c.at("name")},
                                   {"arguments", str_or(c, "arguments", "{}")}});
            }
            msg = {{"role", "assistant"}, {"content", content}};
        }
        json resp = {{"message", msg}};
        if (op.contains("usage")) {
            resp["usage"] = op["usage"];
        }
        check_error(w, op, attempt([&] { w.live_agent().record_response(resp.dump()); }));
    } else if (name == "toolResult") {
        json r = {{"callId", str_or(op, "callId", "")}};
        if (op.contains("content")) {
            r["content"] = op["content"];
        } else {
            r["text"] = str_or(op, "text", "ok");
        }
        r["isError"] = bool_or(op, "isError", false);
        check_error(w, op, attempt([&] { w.live_agent().record_tool_result(r.dump()); }));
    } else if (name == "inject") {
        check_error(w, op, attempt([&] { w.live_agent().inject(user_message(op.at("user")).dump()); }));
    } else if (name == "providerError") {
        json e = {{"message", str_or(op, "message", "provider error")},
                  {"overflow", bool_or(op, "overflow", false)}};
        w.cancel = std::make_shared<llmsession::Cancel>();
        auto cancel = w.cancel;
        bool retry = false;
        auto error = attempt([&] { retry = w.live_agent().provider_error(e.dump(), cancel.get()); });
        if (!error) {
            w.out["providerError"] = retry ? "retry" : "recorded";
        }
        if (!error && op.contains("expectOutcome")) {
            std::string got = retry ? "retry" : "recorded";
            if (got != op["expectOutcome"].get<std::string>()) {
                fail("expected outcome " + op["expectOutcome"].get<std::string>() + ", got " + got);
            }
        }
        check_error(w, op, error);
    } else if (name == "endTurn") {
        check_error(w, op, attempt([&] { w.live_agent().end_turn(str_or(op, "reason", "completed")); }));
    } else if (name == "setOptions") {
        json o = w.options;
        if (op.contains("system")) {
            if (op["system"].is_null()) {
                o.erase("system");
            } else {
                o["system"] = op["system"];
            }
        }
        if (op.contains("tools")) {
            o["tools"] = op["tools"];
        }
        if (op.contains("config")) {
            o["config"] = op["config"];
        }
        // Invalid options are the op's error (the library names them) and change nothing.
        auto error = attempt([&] { w.live_agent().set_options(o.dump()); });
        if (!error) {
            w.options = o;
        }
        check_error(w, op, error);
    } else if (name == "mutateListener") {
        std::size_t i = op.value("index", std::size_t(0));
        if (i >= w.listeners.size()) {
            fail("no such listener");
        }
        auto &l = w.listeners[i];
        std::lock_guard<std::mutex> lock(l->mutex);
        for (auto &m : l->held) {
            m["content"] = json::array({{{"type", "text"}, {"text", str_or(op, "text", "mutated")}}});
        }
    } else if (name == "resume") {
        dispose_agent(w);
        if (bool_or(op, "reload", true)) {
            llmsession::Session s = reload(*w.session);
            w.session.emplace(std::move(s));
        }
        set_listeners(w, get_or_null(op, "listeners"), get_or_null(op, "preStep"));
        if (op.contains("system")) {
            if (op["system"].is_string()) {
                w.options["system"] = op["system"];
            } else {
                w.options.erase("system");
            }
        }
        w.last_request.reset();
        auto error = attempt([&] { new_agent(w); });
        record_outcome(w, error);
        if (op.contains("expectError")) {
            if (!error) {
                fail("expected resume to fail");
            }
        } else if (error) {
            fail("resume: " + err_str(*error));
        }
    } else if (name == "secondAgent") {
        check_error(w, op, attempt([&] { llmsession::Agent second(*w.session, w.options.dump()); }));
    } else if (name == "fork") {
        dispose_agent(w);
        json opts = {{"id", "forked-session"}};
        if (op.contains("seedLength")) {
            opts["seedLength"] = op["seedLength"];
        }
        std::optional<llmsession::Session> forked;
        auto error = attempt([&] { forked.emplace(w.session->fork(opts.dump())); });
        if (forked) {
            w.session.emplace(std::move(*forked));
            w.last_request.reset();
        }
        new_agent(w);
        check_error(w, op, error);
    } else if (name == "compact") {
        json opts = json::object();
        if (op.contains("span")) {
            opts["span"] = op["span"];
        }
        w.cancel = std::make_shared<llmsession::Cancel>();
        auto cancel = w.cancel;
        std::string out;
        auto error = attempt([&] { out = w.live_agent().compact(opts.dump(), cancel.get()); });
        json outcome;
        if (!error) {
            outcome = json::parse(out);
        } else if (error->status() == LLS_ERR_SUMMARISER) {
            // The C ABI reports a compaction that failed as an error whose detail carries the
            // outcome object; the Rust API returns it. The outcome is what the op returned.
            json detail = json::parse(error->detail());
            if (detail.contains("outcome")) {
                outcome = detail["outcome"];
                error.reset();
            }
        }
        if (!error) {
            w.out["compaction"] = outcome;
        }
        if (!error && op.contains("expectOutcome")) {
            std::string want = op["expectOutcome"];
            std::string got = str_or(outcome, "outcome", "?");
            if (got != want) {
                fail("expected compaction outcome " + want + ", got " + got + " (" + outcome.dump() + ")");
            }
        }
        check_error(w, op, error);
    } else if (name == "setPolicy") {
        auto error = attempt([&] { w.live_agent().set_policy(op.at("policy").dump()); });
        if (!error) {
            w.policy = op["policy"];
        }
        check_error(w, op, error);
    } else if (name == "setSummariser") {
        w.summariser = op.at("summariser");
        w.live_agent().set_summariser(summariser(w, w.summariser));
    } else if (name == "dispose") {
        dispose_agent(w);
    } else if (name == "setCounter") {
        w.counter = get_or_null(op, "counter");
        if (w.counter.is_null()) {
            w.live_agent().clear_token_counter();
        } else {
            w.live_agent().set_token_counter(token_counter(w, w.counter));
        }
    } else if (name == "load") {
        load(w, op);
    } else if (name == "expectLog") {
        expect_log(w, op);
    } else if (name == "expectSummaryRequest") {
        expect_summary(w, op);
    } else if (name == "expectPreStep") {
        std::lock_guard<std::mutex> lock(w.seen_mutex);
        std::size_t i = op.value("index", std::size_t(0));
        if (i >= w.pre_step_seen.size()) {
            fail("pre-step call " + std::to_string(i) + " did not happen (" +
                 std::to_string(w.pre_step_seen.size()) + " calls)");
        }
        check_pointers("pre-step", w.pre_step_seen[i], get_or_null(op, "pointers"));
    } else {
        fail("unknown op \"" + name + "\"");
    }
}

inline void expect_log(World &w, const json &op) {
    json events = w.events();
    if (op.contains("headers")) {
        const json &want = op["headers"];
        std::vector<json> got;
        for (const auto &e : events) {
            if (e["type"] == "request/header") {
                got.push_back(e);
            }
        }
        if (got.size() != want.size()) {
            std::string reasons;
            for (const auto &g : got) {
                reasons += g["data"].value("reason", json()).dump() + " ";
            }
            fail("expected " + std::to_string(want.size()) + " header snapshots, got " +
                 std::to_string(got.size()) + ": " + reasons);
        }
        for (std::size_t i = 0; i < got.size(); ++i) {
            check_pointers("header", got[i]["data"], want[i]);
        }
    }
    if (op.contains("count")) {
        for (auto it = op["count"].begin(); it != op["count"].end(); ++it) {
            std::size_t got = 0;
            for (const auto &e : events) {
                got += e["type"] == it.key() ? 1 : 0;
            }
            if (json(got) != it.value()) {
                fail("expected " + it.value().dump() + " " + it.key() + " events, got " +
                     std::to_string(got));
            }
        }
    }
    if (op.contains("last")) {
        const json &want = op["last"];
        if (events.size() < want.size()) {
            fail("fewer events than expected");
        }
        std::size_t base = events.size() - want.size();
        for (std::size_t i = 0; i < want.size(); ++i) {
            check_pointers("event", events[base + i], want[i]);
        }
    }
    if (op.contains("compositions")) {
        std::size_t got = w.listeners.empty() ? 0 : w.listeners[0]->calls.load();
        if (json(got) != op["compositions"]) {
            fail("expected " + op["compositions"].dump() +
                 " compositions (calls of the first listener), got " + std::to_string(got));
        }
    }
    std::string h = w.session->history();
    for (const auto &t : get_or_null(op, "historyExcludes")) {
        if (h.find(t.get<std::string>()) != std::string::npos) {
            fail("history contains " + t.dump());
        }
    }
    for (const auto &t : get_or_null(op, "historyIncludes")) {
        if (h.find(t.get<std::string>()) == std::string::npos) {
            fail("history does not contain " + t.dump() + ": " + clip(h));
        }
    }
    json hist = json::parse(h);
    if (op.contains("historyPointers")) {
        check_pointers("history", hist, op["historyPointers"]);
    }
    if (op.contains("historyLength") && json(hist.size()) != op["historyLength"]) {
        fail("expected " + op["historyLength"].dump() + " history messages, got " +
             std::to_string(hist.size()));
    }
}

// Every envelope field of a summarisation request but its messages, compared with the routed
// request it replays: the routed call config with maxTokens replaced by the summary budget and the
// model by the target's; a target of another provider keeps only the vocabulary's fields (no
// pass-through field). System, tools and the session id are the routed request's.
inline void check_summary_envelope(const json &summary, const json &routed) {
    json want = routed;
    for (const char *k : {"messages", "turn", "step"}) {
        want.erase(k);
    }
    if (!summary.contains("maxTokens") || !summary["maxTokens"].is_number_unsigned()) {
        fail("summary request: maxTokens (the summary budget) is missing");
    }
    want["maxTokens"] = summary["maxTokens"];
    want["purpose"] = "compaction";
    if (get_or_null(summary, "provider") != get_or_null(routed, "provider")) {
        json kept = json::object();
        for (const char *k : {"provider", "model", "reasoningEffort", "temperature", "maxTokens", "stop", "system", "tools",
                              "sessionId", "purpose"}) {
            if (want.contains(k)) {
                kept[k] = want[k];
            }
        }
        want = kept;
        want["provider"] = get_or_null(summary, "provider");
    }
    want["model"] = get_or_null(summary, "model");
    std::vector<std::string> keys;
    for (auto it = want.begin(); it != want.end(); ++it) {
        keys.push_back(it.key());
    }
    for (auto it = summary.begin(); it != summary.end(); ++it) {
        keys.push_back(it.key());
    }
    for (const auto &k : keys) {
        if (k == "messages") {
            continue;
        }
        const json &got = get_or_null(summary, k.c_str());
        const json &exp = get_or_null(want, k.c_str());
        if (got != exp) {
            fail("summary request field " + k + " is " + (summary.contains(k) ? got.dump() : "absent") +
                 " but the routed request gives " + (want.contains(k) ? exp.dump() : "absent"));
        }
    }
}

inline void expect_summary(World &w, const json &op) {
    std::vector<SummaryCall> seen;
    {
        std::lock_guard<std::mutex> lock(w.seen_mutex);
        seen = w.summaries;
    }
    if (op.contains("count")) {
        if (json(seen.size()) != op["count"]) {
            fail("expected " + op["count"].dump() + " summarisation requests so far, got " +
                 std::to_string(seen.size()));
        }
        bool only = true;
        for (auto it = op.begin(); it != op.end(); ++it) {
            only = only && (it.key() == "op" || it.key() == "count");
        }
        if (only) {
            return;
        }
    }
    long long i = op.value("index", 0LL);
    if (i < 0) {
        i += static_cast<long long>(seen.size());
    }
    if (i < 0 || static_cast<std::size_t>(i) >= seen.size()) {
        fail("summarisation request " + std::to_string(i) + " was not sent (" +
             std::to_string(seen.size()) + " sent)");
    }
    const SummaryCall &req = seen[static_cast<std::size_t>(i)];
    json v = json::parse(req.text);
    check_pointers("summary request", v, get_or_null(op, "pointers"));
    for (const auto &t : get_or_null(op, "includes")) {
        if (req.text.find(t.get<std::string>()) == std::string::npos) {
            fail("summary request " + std::to_string(i) + " does not contain " + t.dump());
        }
    }
    for (const auto &t : get_or_null(op, "excludes")) {
        if (req.text.find(t.get<std::string>()) != std::string::npos) {
            fail("summary request " + std::to_string(i) + " contains " + t.dump());
        }
    }
    bool replays = bool_or(op, "replaysLastRequest", false);
    bool extends = bool_or(op, "extendsLastRequest", false);
    if (!replays && !extends) {
        return;
    }
    const json *last = nullptr;
    for (std::size_t k = w.request_marks.size(); k-- > 0;) {
        if (w.request_marks[k] <= static_cast<std::size_t>(i)) {
            last = &w.requests[k];
            break;
        }
    }
    if (!last) {
        fail("no routed request precedes this summarisation request");
    }
    check_summary_envelope(v, *last);
    json m = messages_of(v), l = messages_of(*last);
    if (m.empty()) {
        fail("the summary request has no messages");
    }
    json body(m.begin(), m.end() - 1);
    const json &shorter = replays ? body : l;
    const json &longer = replays ? l : body;
    std::size_t shared = replays ? body.size() : l.size();
    if (!is_prefix_of(shorter, longer)) {
        fail("the summary request without its last message (" + std::to_string(body.size()) +
             " messages) and the last routed request (" + std::to_string(l.size()) +
             " messages) do not share their leading messages");
    }
    if (req.shared_messages != shared) {
        fail("sharedMessages is " + std::to_string(req.shared_messages) + ", expected " +
             std::to_string(shared));
    }
    const json &lastm = m.back();
    if (lastm["role"] != "user" || lastm.dump().find("compaction engine") == std::string::npos) {
        fail("the last message is not the instruction: " + clip(lastm.dump()));
    }
}

/// A temporary file removed on destruction.
struct TempFile {
    std::string path;
    explicit TempFile(const std::string &stem) {
        static std::atomic<unsigned> counter{0};
        const char *dir = std::getenv("TMPDIR");
        path = std::string(dir && *dir ? dir : "/tmp") + "/llmsession-cpp-" + stem + "-" +
               std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".jsonl";
    }
    ~TempFile() { std::remove(path.c_str()); }
    void write(const std::vector<std::string> &lines) const {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        for (const auto &l : lines) {
            f << l << '\n';
        }
    }
};

/// Whether a verify failure names the line (a record whose chained digest breaks) or the step
/// (a rebuilt request that differs).
inline void expect_verify_failure(const std::vector<std::string> &lines, const std::string &what) {
    TempFile f("damaged");
    f.write(lines);
    auto error = attempt([&] { llmsession::verify_file(f.path); });
    if (!error) {
        fail("verify passed on a copy " + what);
    }
    json detail = json::parse(error->detail());
    if (!detail.contains("step") && !detail.contains("line")) {
        fail("verify failure names neither the line nor the step: " + err_str(*error));
    }
}

/// The automatic checks after the last op: the final log verifies; damaged copies do not.
inline void verify_and_damage(World &w) {
    json header = json::parse(w.session->info());
    json events = w.events();
    TempFile f("final");
    f.write(stored_records(*w.session));
    json report;
    try {
        report = json::parse(llmsession::verify_file(f.path));
    } catch (const llmsession::Error &e) {
        fail("verify failed on the final log: " + err_str(e));
    }
    if (report.value("requests", 0) == 0) {
        return;
    }
    // Damage 1: the messagePrefix removed from the first header that has one.
    for (std::size_t i = 0; i < events.size(); ++i) {
        const json &e = events[i];
        if (e["type"] == "request/header" && e["data"].contains("header") &&
            e["data"]["header"].contains("messagePrefix")) {
            json bad = events;
            bad[i]["data"]["header"].erase("messagePrefix");
            std::vector<std::string> bl{header.dump()};
            for (const auto &x : bad) {
                bl.push_back(x.dump());
            }
            expect_verify_failure(bl, "whose prefix was removed from the header");
            break;
        }
    }
    // Damage 2: the first user/message before the last step/start dropped.
    std::size_t last_step = 0;
    for (std::size_t i = 0; i < events.size(); ++i) {
        if (events[i]["type"] == "step/start") {
            last_step = i;
        }
    }
    for (std::size_t i = 0; i < last_step; ++i) {
        if (events[i]["type"] == "user/message") {
            std::vector<std::string> bl{header.dump()};
            for (std::size_t k = 0; k < events.size(); ++k) {
                if (k != i) {
                    bl.push_back(events[k].dump());
                }
            }
            expect_verify_failure(bl, "with event " + std::to_string(i) + " dropped");
            break;
        }
    }
}

/// Runs one scenario file; throws Failure naming the op that failed.
inline void run_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        fail(path + ": cannot read");
    }
    std::stringstream ss;
    ss << in.rdbuf();
    json sc = json::parse(ss.str());
    expand(sc);
    World w;
    w.session.emplace(llmsession::Session::memory(R"({"id":"scenario-session"})"));
    w.options = sc.at("agent");
    w.options["checkRequests"] = true;
    w.summariser = get_or_null(sc, "summariser");
    w.policy = get_or_null(sc, "policy");
    w.counter = get_or_null(sc, "counter");
    set_listeners(w, get_or_null(sc, "listeners"), get_or_null(sc, "preStep"));
    try {
        new_agent(w);
    } catch (const llmsession::Error &e) {
        fail("creating the agent: " + err_str(e));
    }
    const json &ops = sc.at("ops");
    json entries = json::array();
    for (std::size_t i = 0; i < ops.size(); ++i) {
        w.out = json::object();
        try {
            run_op(w, ops[i]);
        } catch (const Failure &f) {
            fail("op " + std::to_string(i) + " (" + ops[i].value("op", std::string("?")) + "): " + f.what());
        } catch (const llmsession::Error &e) {
            fail("op " + std::to_string(i) + " (" + ops[i].value("op", std::string("?")) +
                 "): llmsession error " + err_str(e));
        }
        json entry = w.out;
        entry["i"] = i;
        entry["op"] = ops[i].at("op");
        if (!entry.contains("outcome")) {
            entry["outcome"] = "ok";
        }
        entry["events"] = w.events().size();
        std::lock_guard<std::mutex> lock(w.seen_mutex);
        if (!w.calls.empty()) {
            entry["calls"] = std::exchange(w.calls, json::array());
        }
        if (w.counter_calls > 0) {
            entry["counterCalls"] = std::exchange(w.counter_calls, 0);
        }
        entries.push_back(entry);
    }
    json events = json::array();
    for (const auto &e : w.events()) {
        events.push_back(golden::masked_record(e));
    }
    json transcript = {{"transcript", 1},
                       {"scenario", std::filesystem::path(path).filename().string()},
                       {"name", sc.value("name", std::string("(unnamed)"))},
                       {"ops", entries},
                       {"final",
                        {{"session", golden::masked_record(json::parse(w.session->info()))},
                         {"events", events},
                         {"history", json::parse(w.session->history())}}}};
    golden::mask_strings(transcript, w.dir ? w.dir->path : "");
    if (auto d = golden::compare(path, transcript, "scenario-transcripts")) {
        fail(*d);
    }
    try {
        verify_and_damage(w);
    } catch (const llmsession::Error &e) {
        fail("final checks: " + err_str(e));
    }
    dispose_agent(w);
}

} // namespace scenario
