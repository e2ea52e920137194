// The C++ driver for the shared scenario files (tests/scenarios/*.json), through llmsession.hpp.
// It plays the ops and the declarative fakes (docs/scenarios.md) and records the run's golden
// transcript, which golden.hpp compares with tests/scenarios/golden/<stem>.json. The scenarios'
// own checks (expectError, expect blocks, expectLog, ...) live once, in the Rust runner
// (tests/scenarios.rs): the transcript pins everything they check.

#pragma once

#include "scenario_fakes.hpp"

#include <string>

namespace scenario {

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

inline void dispose_agent(World &w) {
    if (w.agent) {
        w.agent->dispose();
        w.agent.reset();
    }
}

/// Runs `f` and records the op's outcome: `"ok"`, or `"error"` with `{kind, field?, message}`.
/// Returns whether it succeeded.
template <class F> bool call(World &w, F &&f) {
    try {
        f();
        w.out["outcome"] = "ok";
        return true;
    } catch (const llmsession::Error &e) {
        json err = {{"kind", e.kind()}, {"message", e.message()}}, detail = json::parse(e.detail());
        if (e.status() == LLS_ERR_SUMMARISER && detail.contains("outcome")) {
            // A failed compaction: the C ABI's error carries the outcome the Rust API returns.
            w.out["compaction"] = detail["outcome"];
            w.out["outcome"] = "ok";
            return false;
        }
        if (!get_or_null(detail, "field").is_null()) {
            err["field"] = detail["field"];
        }
        w.out["outcome"] = "error";
        w.out["error"] = err;
        if (e.status() == LLS_ERR_DISPOSED) {
            w.agent.reset();
        }
        return false;
    }
}


/// `load`: reopens the session from a log file written from the op's records, or the current
/// log's, changed as the op says (docs/scenarios.md, "Loading a log").
inline void load(World &w, const json &op) {
    std::vector<std::string> records;
    for (const auto &r : get_or_null(op, "records")) {
        records.push_back(r.is_string() ? r.get<std::string>() : r.dump());
    }
    if (!op.contains("records")) {
        records = raw_records(*w.session);
    }
    const json &drop = get_or_null(op, "dropLast");
    records.resize(records.size() - std::min(records.size(), drop.is_number_unsigned() ? drop.get<std::size_t>() : std::size_t(0)));
    for (const auto &e : get_or_null(op, "edit")) {
        std::string from = str_or(e, "replace", ""), to = str_or(e, "with", "");
        long i = -1, n = static_cast<long>(records.size());
        if (e.contains("record")) {
            i = e["record"].get<long>() + (e["record"].get<long>() < 0 ? n : 0);
        } else {
            for (long j = n - 1; j >= 0 && i < 0; --j) {
                i = records[j].find(from) != std::string::npos ? j : -1;
            }
        }
        if (i < 0 || i >= n || records[i].find(from) == std::string::npos) {
            fail("load: there is no record " + std::to_string(i) + " holding \"" + from + "\" to edit");
        }
        records[i].replace(records[i].find(from), from.size(), to);
    }
    dispose_agent(w);
    std::string path = w.dir.path + "/load-" + std::to_string(++w.loads) + ".jsonl";
    {
        std::ofstream f(path, std::ios::binary | std::ios::trunc);
        for (const auto &r : records) {
            f << r << '\n';
        }
        f << str_or(op, "tail", "");
    }
    if (call(w, [&] { w.session.emplace(llmsession::Session::open_file(path)); })) {
        w.out["loadReport"] = json::parse(w.session->load_report());
    }
    new_agent(w);  // on a failed open the session stays the one before
}

/// Runs one op, recording what it returned in `w.out`.
inline void run_op(World &w, const json &op) {
    std::string name = str_or(op, "op", "");
    if (name == "turn") {
        call(w, [&] { w.live().start_turn(user_message(op.at("user")).dump()); });
    } else if (name == "request") {
        w.cancel = std::make_shared<llmsession::Cancel>();
        if (get_or_null(op, "cancelled") == true) {
            w.cancel->trip();
        }
        auto cancel = w.cancel;
        std::string envelope;
        if (call(w, [&] { envelope = std::string(w.live().next_request(cancel.get())); })) {
            w.out["request"] = json::parse(w.agent->request_info());
            w.sent.emplace_back(w.summaries.size(), envelope);
        }
    } else if (name == "respond") {
        json msg = get_or_null(op, "message");  // as written: a null message too
        if (!op.contains("message")) {
            json content = json::array();
            if (op.contains("text") && op["text"].is_string()) {
                content.push_back({{"type", "text"}, {"text", op["text"]}});
            }
            for (const auto &c : get_or_null(op, "toolCalls")) {
                content.push_back({{"type", "tool-call"}, {"id", c.at("id")}, {"name", c.at("name")}, {"arguments", str_or(c, "arguments", "{}")}});
            }
            msg = {{"role", "assistant"}, {"content", content}};
        }
        json resp = {{"message", msg}};
        if (op.contains("usage")) {
            resp["usage"] = op["usage"];
        }
        call(w, [&] { w.live().record_response(resp.dump()); });
    } else if (name == "toolResult") {
        json r = {{"callId", op.contains("callId") ? op["callId"] : json("")}};
        if (op.contains("isError")) {
            r["isError"] = op["isError"];
        }
        if (op.contains("content")) {
            r["content"] = op["content"];
        } else {
            r["text"] = str_or(op, "text", "ok");
        }
        call(w, [&] { w.live().record_tool_result(r.dump()); });
    } else if (name == "inject") {
        call(w, [&] { w.live().inject(user_message(op.at("user")).dump()); });
    } else if (name == "providerError") {
        json e = {{"message", str_or(op, "message", "provider error")}, {"overflow", get_or_null(op, "overflow") == true}};
        w.cancel = std::make_shared<llmsession::Cancel>();
        auto cancel = w.cancel;
        bool retry = false;
        if (call(w, [&] { retry = w.live().provider_error(e.dump(), cancel.get()); })) {
            w.out["providerError"] = retry ? "retry" : "recorded";
        }
    } else if (name == "endTurn") {
        call(w, [&] { w.live().end_turn(str_or(op, "reason", "completed")); });
    } else if (name == "setOptions") {
        json o = w.options;
        for (const char *k : {"system", "tools", "config"}) {
            if (op.contains(k) && op[k].is_null() && std::string(k) == "system") {
                o.erase(k);
            } else if (op.contains(k)) {
                o[k] = op[k];
            }
        }
        if (call(w, [&] { w.live().set_options(o.dump()); })) {
            w.options = o;
        }
    } else if (name == "mutateListener") {
        std::size_t i = get_or_null(op, "index").is_number_unsigned() ? op["index"].get<std::size_t>() : 0;
        if (i >= w.listeners.size()) {
            fail("no such listener");
        }
        std::lock_guard<std::mutex> lock(w.listeners[i]->mutex);
        for (auto &m : w.listeners[i]->held) {
            m["content"] = json::array({{{"type", "text"}, {"text", str_or(op, "text", "mutated")}}});
        }
    } else if (name == "resume") {
        dispose_agent(w);
        if (!get_or_null(op, "reload").is_boolean() || op["reload"].get<bool>()) {
            w.session.emplace(reload(*w.session));
        }
        if (op.contains("listeners")) {
            w.listeners = listeners_of(op["listeners"]);
        }
        if (op.contains("preStep")) {
            w.pre_steps = listeners_of(op["preStep"]);
        }
        if (op.contains("system") && op["system"].is_string()) {
            w.options["system"] = op["system"];
        } else if (op.contains("system")) {
            w.options.erase("system");
        }
        call(w, [&] { new_agent(w); });
    } else if (name == "secondAgent") {
        call(w, [&] { llmsession::Agent second(*w.session, w.options.dump()); });
    } else if (name == "fork") {
        dispose_agent(w);
        json opts = {{"id", "forked-session"}};
        if (get_or_null(op, "seedLength").is_number_unsigned()) {
            opts["seedLength"] = op["seedLength"];
        }
        call(w, [&] { w.session.emplace(w.session->fork(opts.dump())); });
        new_agent(w);
    } else if (name == "compact") {
        json opts = op.contains("span") ? json{{"span", op["span"]}} : json::object();
        w.cancel = std::make_shared<llmsession::Cancel>();
        auto cancel = w.cancel;
        std::string out;
        if (call(w, [&] { out = w.live().compact(opts.dump(), cancel.get()); })) {
            w.out["compaction"] = json::parse(out);
        }
    } else if (name == "setPolicy") {
        if (call(w, [&] { w.live().set_policy(op.at("policy").dump()); })) {
            w.policy = op["policy"];
        }
    } else if (name == "setSummariser") {
        w.summariser = op.at("summariser");
        w.live().set_summariser(summariser(w, w.summariser));
    } else if (name == "dispose") {
        dispose_agent(w);
    } else if (name == "setCounter") {
        w.counter = get_or_null(op, "counter");
        if (w.counter.is_null()) {
            w.live().clear_token_counter();
        } else {
            w.live().set_token_counter(token_counter(w, w.counter));
        }
    } else if (name == "load") {
        load(w, op);
    } else if (name == "nativeBegin") {
        std::string raw;
        if (call(w, [&] { raw = w.live().begin_native_compaction(); })) {
            json r = json::parse(raw);
            std::string envelope = r.at("envelope").get<std::string>();
            r["envelope"] = envelope.size();
            r["body"] = r.at("body").get<std::string>().size();
            w.out["native"] = r;
            w.sent.emplace_back(w.summaries.size(), envelope);
        }
    } else if (name == "nativeRecord" || name == "nativeFail") {
        std::string raw;
        bool ok = name == "nativeRecord"
                      ? call(w, [&] { raw = w.live().record_native_compaction(op.at("body").dump()); })
                      : call(w, [&] { raw = w.live().fail_native_compaction(str_or(op, "error", "")); });
        if (ok) {
            w.out["native"] = json::parse(raw);
        }
    } else if (name == "replay") {
        call(w, [&] {
            auto r = llmsession::Replay::of(*w.session);
            std::vector<std::string> order;
            std::size_t done = 0;
            for (const auto &[mark, env] : w.sent) {
                order.insert(order.end(), w.summaries.begin() + done, w.summaries.begin() + mark);
                done = mark;
                order.push_back(env);
            }
            order.insert(order.end(), w.summaries.begin() + done, w.summaries.end());
            json answers = json::array();
            for (const auto &env : order) {
                json a = json::parse(r.answer(env));
                answers.push_back({{"purpose", a["purpose"]}, {"id", a["id"]}, {"outcome", a["outcome"]}});
            }
            w.out["replay"] = {{"requests", json::parse(r.info()).at("requests")}, {"answers", answers}};
        });
    } else if (name == "explain") {
        call(w, [&] {
            json x = json::parse(w.session->explain());
            const json &t = x.at("totals");
            w.out["explain"] = {{"compactions", x.at("compactions")},
                                {"compactionTotals", x.at("compactionTotals")},
                                {"requests", {{"conversation", t.at("conversationRequests")},
                                              {"compaction", t.at("compactionRequests")},
                                              {"notRebuilt", t.at("notRebuilt")}}}};
        });
    } else if (name != "expectLog" && name != "expectSummaryRequest" && name != "expectPreStep") {
        fail("unknown op \"" + name + "\"");
    }
    if (w.disposed.exchange(false)) {  // an instance a callback disposed is dropped after the op
        w.agent.reset();
    }
}

/// Plays one scenario file and compares its transcript with the golden file; throws Failure
/// naming the op, or the first difference.
inline void run_file(const std::string &path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        fail(path + ": cannot read");
    }
    std::stringstream ss;
    ss << in.rdbuf();
    json sc = json::parse(ss.str());
    golden::expand(sc);
    World w;
    w.session.emplace(llmsession::Session::memory(R"({"id":"scenario-session"})"));
    w.options = sc.at("agent");
    w.options["checkRequests"] = true;
    w.summariser = get_or_null(sc, "summariser");
    w.policy = get_or_null(sc, "policy");
    w.counter = get_or_null(sc, "counter");
    w.listeners = listeners_of(get_or_null(sc, "listeners"));
    w.pre_steps = listeners_of(get_or_null(sc, "preStep"));
    new_agent(w);
    json ops = json::array();
    for (std::size_t i = 0; i < sc.at("ops").size(); ++i) {
        const json &op = sc["ops"][i];
        w.out = {{"i", i}, {"op", op.at("op")}, {"outcome", "ok"}};
        try {
            run_op(w, op);
        } catch (const std::exception &e) {
            fail("op " + std::to_string(i) + " (" + op.value("op", std::string("?")) + "): " + e.what());
        }
        w.out["events"] = json::parse(w.session->events()).size();
        std::lock_guard<std::mutex> lock(w.mutex);
        if (!w.calls.empty()) {
            w.out["calls"] = std::exchange(w.calls, json::array());
        }
        if (w.counter_calls > 0) {
            w.out["counterCalls"] = std::exchange(w.counter_calls, 0);
        }
        ops.push_back(w.out);
    }
    json events = json::array();
    for (const auto &e : json::parse(w.session->events())) {
        events.push_back(golden::masked_record(e));
    }
    json transcript = {{"transcript", 1},
                       {"scenario", std::filesystem::path(path).filename().string()},
                       {"name", str_or(sc, "name", "(unnamed)")},
                       {"ops", ops},
                       {"final",
                        {{"session", golden::masked_record(json::parse(w.session->info()))},
                         {"events", events},
                         {"history", json::parse(w.session->history())}}}};
    golden::mask_strings(transcript, w.dir.path);
    dispose_agent(w);
    if (auto d = golden::compare(path, transcript, "scenario-transcripts")) {
        fail(*d);
    }
}

} // namespace scenario

