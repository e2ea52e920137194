// The declarative fakes of the shared scenario files (docs/scenarios.md, "Fakes"), as C++
// callbacks through llmsession.hpp: prefix and pre-step listeners, the summariser, the host
// token counter, and a host store held in memory. They act on the World the driver
// (scenario_runner.hpp) plays a scenario in, and journal what they receive for its transcript.
#pragma once

#include "golden.hpp"
#include "llmsession.hpp"

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <utility>
#include <vector>

namespace scenario {

using json = nlohmann::json;


/// The driver's own failure (a scenario it cannot play, or a transcript that differs).
struct Failure : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const std::string &why) { throw Failure(why); }

inline std::string str_or(const json &o, const char *key, const std::string &dflt) {
    auto it = o.find(key);
    return it != o.end() && it->is_string() ? it->get<std::string>() : dflt;
}

inline const json &get_or_null(const json &o, const char *key) {
    static const json null;
    auto it = o.is_object() ? o.find(key) : o.end();
    return o.is_object() && it != o.end() ? *it : null;
}

/// Whether a fake with `"times": n` still acts on its `calls`-th call (counted from 0).
inline bool active(const json &spec, std::size_t calls) {
    auto it = spec.find("times");
    return it == spec.end() || !it->is_number_unsigned() || calls < it->get<std::size_t>();
}

inline json user_message(const json &v) {
    return v.is_string() ? json{{"role", "user"}, {"content", {{{"type", "text"}, {"text", v}}}}} : v;
}

/// The event appending `message` as context from `source` (`host` or `plugin`).
inline std::string context_event(const json &message, const char *source) {
    return json{{"type", "user/message"}, {"data", {{"message", message}, {"source", source}}}, {"surfaceOp", "append"}}.dump();
}

/// The characters (code points) of every string in `v` (object keys left out).
inline std::size_t string_chars(const json &v) {
    std::size_t n = 0;
    if (v.is_string()) {
        for (unsigned char c : v.get_ref<const std::string &>()) {
            n += (c & 0xC0) != 0x80 ? 1 : 0;
        }
    } else if (v.is_structured()) {
        for (const auto &x : v) {
            n += string_chars(x);
        }
    }
    return n;
}

/// A temporary directory for the logs `load` opens, removed with everything in it.
struct TempDir {
    std::string path;
    TempDir() {
        const char *dir = std::getenv("TMPDIR");
        std::string tmpl = std::string(dir && *dir ? dir : "/tmp") + "/llmsession-cpp-load-XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) {
            fail("cannot create a temporary directory");
        }
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
    }
};

struct Listener {
    std::size_t index;  // its position among the listeners (or pre-step listeners)
    json spec;
    std::atomic<std::size_t> calls{0};
    std::mutex mutex;
    json held;  // the messages it adds (mutateListener changes them)
};

struct World {
    std::optional<llmsession::Session> session;
    std::optional<llmsession::Agent> agent;
    json options, summariser, policy, counter;  // null: none (the summariser: fixed)
    std::vector<std::shared_ptr<Listener>> listeners, pre_steps;
    std::shared_ptr<llmsession::Cancel> cancel = std::make_shared<llmsession::Cancel>();
    std::atomic<bool> disposed{false};  // a callback disposed the instance during the running op
    TempDir dir;
    std::size_t loads = 0;
    std::mutex mutex;
    json calls = json::array();     // what the fakes received since the previous op
    std::size_t counter_calls = 0;  // items the token counter counted since the previous op
    json out = json::object();      // the running op's transcript entry
    std::vector<std::string> summaries;                        // every summarisation request's envelope
    std::vector<std::pair<std::size_t, std::string>> sent;     // (summaries before it, envelope) for replay

    llmsession::Agent &live() {
        if (!agent) {
            fail("no live agent (disposed?)");
        }
        return *agent;
    }
    void journal(json call) {
        std::lock_guard<std::mutex> lock(mutex);
        calls.push_back(std::move(call));
    }
    void dispose_from_callback() {
        disposed = true;
        agent->dispose();
    }
    void append(const json &messages, const char *source) {
        for (const auto &m : messages) {
            session->append(context_event(m, source));
        }
    }
};

inline std::vector<std::shared_ptr<Listener>> listeners_of(const json &specs) {
    std::vector<std::shared_ptr<Listener>> out;
    for (const auto &s : specs) {
        auto l = std::make_shared<Listener>();
        l->index = out.size();
        l->spec = s;
        l->held = s.contains("messages") ? s["messages"] : json::array();
        out.push_back(l);
    }
    return out;
}

inline llmsession::Callback prefix_listener(World &w, std::shared_ptr<Listener> l) {
    return [&w, l](std::string_view in, llmsession::Reply &reply) {
        json input = json::parse(in), rest = input.at("rest");
        w.journal({{"callback", "prefix"}, {"listener", l->index}, {"input", input}});
        bool act = active(l->spec, l->calls++);
        std::string kind = str_or(l->spec, "kind", "delegate");
        json held;
        {
            std::lock_guard<std::mutex> lock(l->mutex);
            held = l->held;
        }
        json prepended = held;
        prepended.insert(prepended.end(), rest.begin(), rest.end());
        if (kind == "append") {
            rest.insert(rest.end(), held.begin(), held.end());
            reply.complete(rest.dump());
        } else if (kind == "delegate" || (kind == "dispose" && act)) {
            if (kind == "dispose") {
                w.dispose_from_callback();
            }
            reply.complete(rest.dump());
        } else if (kind == "fail" && act) {
            reply.fail(str_or(l->spec, "message", "listener failed"));
        } else if (kind == "invalid" && act) {
            reply.complete(get_or_null(l->spec, "output").dump());
        } else {
            if (kind == "cancel" && act) {
                w.cancel->trip();
            } else if (kind == "append-event" && act) {
                w.append(get_or_null(l->spec, "events"), "plugin");
            }
            reply.complete(prepended.dump());
        }
    };
}

inline llmsession::Callback pre_step_listener(World &w, std::shared_ptr<Listener> l) {
    return [&w, l](std::string_view in, llmsession::Reply &reply) {
        w.journal({{"callback", "preStep"}, {"listener", l->index}, {"input", json::parse(in)}});
        bool act = active(l->spec, l->calls++);
        std::string kind = str_or(l->spec, "kind", "record");
        if (kind == "fail" && act) {
            return reply.fail("pre-step failed");
        } else if (kind == "inject" && act) {
            w.append(get_or_null(l->spec, "messages"), "plugin");
        } else if (kind == "cancel" && act) {
            w.cancel->trip();
        } else if (kind == "dispose" && act) {
            w.dispose_from_callback();
        }
        reply.complete("null");
    };
}

inline llmsession::Callback summariser(World &w, json spec) {
    auto calls = std::make_shared<std::atomic<std::size_t>>(0);
    return [&w, spec, calls](std::string_view in, llmsession::Reply &reply) {
        json input = json::parse(in), rec = json::object();
        for (const char *k : {"digest", "provider", "model", "maxTokens", "sharedMessages", "prefixLen"}) {
            rec[k] = get_or_null(input, k);
        }
        // The envelope is spliced into the input as its exact bytes, before "provider".
        rec["bytes"] = in.rfind(",\"provider\":") - std::string_view("{\"request\":").size();
        {
            std::lock_guard<std::mutex> lock(w.mutex);
            w.summaries.emplace_back(in.substr(std::string_view("{\"request\":").size(), rec["bytes"].get<std::size_t>()));
        }
        rec["messageCount"] = input.at("request").at("messages").size();
        w.journal({{"callback", "summariser"}, {"input", rec}});
        bool act = active(spec, (*calls)++);
        std::string kind = str_or(spec, "kind", "fixed");
        json ok = {{"text", str_or(spec, "text", "Summary of the work so far.")}};
        if (spec.contains("usage")) {
            ok["usage"] = spec["usage"];
        }
        if (kind == "fail" && act) {
            return reply.fail("summariser unavailable");
        } else if (kind == "cancel" && act) {
            w.cancel->trip();
            return reply.fail("cancelled");
        } else if (kind == "empty" && act) {
            ok["text"] = "   ";
        } else if (kind == "truncated" && act) {
            ok["truncated"] = true;
        } else if (kind == "long" && act) {
            std::string s;
            for (int i = 0; i < 20000; ++i) {
                s += "very long summary ";
            }
            ok["text"] = s;
        } else if (kind == "append-during" && act) {
            w.append(get_or_null(spec, "messages"), "host");
        } else if (kind == "dispose" && act) {
            w.dispose_from_callback();
        }
        reply.complete(ok.dump());
    };
}

/// A host token counter (docs/scenarios.md, "Token counters").
inline llmsession::Callback token_counter(World &w, json spec) {
    auto calls = std::make_shared<std::atomic<std::size_t>>(0);
    return [&w, spec, calls](std::string_view in, llmsession::Reply &reply) {
        {
            std::lock_guard<std::mutex> lock(w.mutex);
            ++w.counter_calls;
        }
        bool act = active(spec, (*calls)++);
        const json &p = get_or_null(spec, "perToken");
        std::size_t per = std::max<std::size_t>(1, p.is_number_unsigned() ? p.get<std::size_t>() : 4);
        std::string kind = str_or(spec, "kind", "chars");
        if (kind == "fail" && act) {
            return reply.fail("token counter failed");
        } else if (kind == "append-during" && act) {
            w.append(get_or_null(spec, "messages"), "host");
        } else if (kind == "dispose" && act) {
            w.dispose_from_callback();
        }
        reply.complete(std::to_string((string_chars(json::parse(in)) + per - 1) / per));
    };
}


/// The stored records of a session: its header record, then every event's record, byte for byte.
inline std::vector<std::string> raw_records(const llmsession::Session &s) {
    std::vector<std::string> records{s.info()};
    for (std::size_t i = 0, n = json::parse(s.events()).size(); i < n; ++i) {
        std::string one = s.events(i, i + 1);  // "[record]"
        records.push_back(one.substr(1, one.size() - 2));
    }
    return records;
}

/// A session reopened from its records, through a host store held in memory (conditional and
/// all-or-nothing, as a database would be).
inline llmsession::Session reload(const llmsession::Session &s) {
    auto records = std::make_shared<std::vector<std::string>>(raw_records(s));
    return llmsession::Session::open_store(std::function<std::string(std::string_view)>([records](std::string_view in) {
        json req = json::parse(in);
        std::string op = req.at("op");
        if (op == "load") {
            return json{{"records", *records}}.dump();
        } else if (op == "append") {
            bool create = req.contains("header");
            if (create != records->empty() || (!create && req.at("seq").get<std::size_t>() != records->size() - 1)) {
                return std::string(R"({"conflict":"seq is not the next one"})");
            }
            if (create) {
                records->push_back(req.at("header").get<std::string>());
            }
            for (const auto &r : req.at("records")) {
                records->push_back(r.get<std::string>());
            }
        } else if (op == "undo" || op == "cut") {
            records->resize(std::min(records->size(), req.at(op == "undo" ? "from" : "keep").get<std::size_t>()));
        }
        return std::string("true");
    }));
}


}  // namespace scenario
