// The C++ binding's own tests: errors as exceptions, RAII (no leaked handle), callbacks and
// their trampolines, replies completed from other threads, cancellation.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <future>
#include <mutex>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

using json = nlohmann::json;
using llmsession::Agent;
using llmsession::Cancel;
using llmsession::Error;
using llmsession::Reply;
using llmsession::Session;

namespace {

const char *const kOpts = R"({"config":{"provider":"test","model":"m1"},"system":"be brief"})";

std::string user(const std::string &text) {
    return json{{"role", "user"}, {"content", {{{"type", "text"}, {"text", text}}}}}.dump();
}

std::string answer(const std::string &text) {
    return json{{"message", {{"role", "assistant"}, {"content", {{{"type", "text"}, {"text", text}}}}}}}
        .dump();
}

std::string long_text(const char *word, int times) {
    std::string s;
    for (int i = 0; i < times; ++i) {
        s += word;
    }
    return s;
}

/// Records the status of the Error `f` throws (or fails the test).
template <class F> Error expect_error(F &&f, lls_status status) {
    try {
        f();
    } catch (const Error &e) {
        EXPECT_EQ(e.status(), status) << e.kind() << ": " << e.message();
        return e;
    }
    ADD_FAILURE() << "expected an llmsession::Error with status " << status;
    return Error(LLS_OK, "", "{}");
}

/// One turn with one request and one long answer, ready to compact.
void one_long_turn(Agent &a) {
    a.start_turn(user(long_text("alpha ", 400)));
    a.next_request();
    a.record_response(answer("short"));
    a.end_turn();
}

struct MyHostError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

/// The live handle count, once it is back to `expected` or clearly will not be. A reply answered
/// from another thread wakes the waiting call just before that thread drops the reply's handle
/// (lls_reply_complete unregisters after notifying), so right after such a call the count may
/// still include the reply for a moment; this waits (a bounded number of yields) for it.
std::size_t settled_handle_count(std::size_t expected) {
    for (int i = 0; i < 2000000 && llmsession::live_handle_count() != expected; ++i) {
        std::this_thread::yield();
    }
    return llmsession::live_handle_count();
}

/// Every test ends with the handle count it started with.
class Binding : public testing::Test {
protected:
    void SetUp() override { before_ = llmsession::live_handle_count(); }
    void TearDown() override { EXPECT_EQ(settled_handle_count(before_), before_) << "leaked handles"; }
    std::size_t before_ = 0;
};

TEST_F(Binding, VersionsAndAbi) {
    EXPECT_NO_THROW(llmsession::check_abi());
    EXPECT_EQ(llmsession::abi_version(), static_cast<std::uint32_t>(LLS_ABI_VERSION));
    std::string v = std::to_string(LLS_VERSION_MAJOR) + "." + std::to_string(LLS_VERSION_MINOR) + "." +
                    std::to_string(LLS_VERSION_PATCH);
    EXPECT_EQ(llmsession::version(), v);
    llmsession::AbiMismatch m(1, 2);
    EXPECT_NE(std::string(m.what()).find("ABI version 2"), std::string::npos);
    EXPECT_GE(llmsession::abi_minor(), static_cast<std::uint32_t>(LLS_ABI_MINOR));
    llmsession::AbiMismatch minor(2, 2, 1);
    EXPECT_EQ(std::string(minor.what()),
              "llmsession: the loaded library has ABI version 2.1, but llmsession.hpp needs 2.2 or later; "
              "install a newer libllmsession");
    EXPECT_EQ(minor.header_minor(), 2u);
    EXPECT_EQ(minor.library_minor(), 1u);
}

TEST_F(Binding, StatusNamesComeFromTheLibrary) {
    EXPECT_STREQ(Error::kind_name(LLS_OK), "ok");
    EXPECT_STREQ(Error::kind_name(5), "corrupt-log");
    EXPECT_STREQ(Error::kind_name(LLS_ERR_READ_ONLY), "read-only");
    EXPECT_STREQ(Error::kind_name(102), "invalid-handle");
    EXPECT_STREQ(Error::kind_name(LLS_ERR_OUT_OF_MEMORY), "out-of-memory");
    EXPECT_STREQ(Error::kind_name(LLS_ERR_NONCONFORMING), "nonconforming");
    for (lls_status unknown : {22, 99, 107, 999, -1}) {
        EXPECT_STREQ(Error::kind_name(unknown), "unknown") << unknown;
    }
    // The library's own strings: the same pointer each time, never freed.
    EXPECT_EQ(Error::kind_name(LLS_ERR_CONFLICT), lls_status_name(LLS_ERR_CONFLICT));
    EXPECT_STREQ(Error(LLS_ERR_LOCKED, "m", "{}").kind(), "locked");

    // A failing call: the error's kind is the detail's.
    std::string path = testing::TempDir() + "/llmsession-cpp-junk-" +
                       std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".jsonl";
    {
        std::ofstream junk(path, std::ios::binary | std::ios::trunc);
        junk << "junk\n";
    }
    Error e = expect_error([&] { Session::open_file(path); }, LLS_ERR_CORRUPT_LOG);
    EXPECT_STREQ(e.kind(), "corrupt-log");
    EXPECT_EQ(json::parse(e.detail())["kind"], e.kind());
    std::remove(path.c_str());
}

TEST_F(Binding, ErrorsCarryStatusMessageAndDetail) {
    Error e = expect_error([] { Session::memory("{not json"); }, LLS_ERR_MALFORMED_JSON);
    EXPECT_STREQ(e.kind(), "malformed-json");
    json d = json::parse(e.detail());
    EXPECT_EQ(d["kind"], "malformed-json");
    EXPECT_TRUE(d.contains("line"));
    EXPECT_EQ(std::string(e.what()), e.message());

    e = expect_error([] { Session::memory(R"({"durability":"sometimes"})"); }, LLS_ERR_INVALID_INPUT);
    EXPECT_STREQ(e.kind(), "invalid-input");

    Session s = Session::memory();
    expect_error([&] { Agent(s, R"({"system":"no config"})"); }, LLS_ERR_INVALID_INPUT);
    Agent a(s, kOpts);
    e = expect_error([&] { a.next_request(); }, LLS_ERR_OUT_OF_ORDER);
    EXPECT_STREQ(e.kind(), "out-of-order");
    expect_error([&] { Agent second(s, kOpts); }, LLS_ERR_BUSY);
    expect_error([&] { a.start_turn("\xc3\x28"); }, LLS_ERR_INVALID_UTF8);
    expect_error([&] { a.start_turn(R"({"role":"assistant","content":[]})"); }, LLS_ERR_INVALID_INPUT);
    expect_error([&] { a.set_policy(R"({"contextWindow":0})"); }, LLS_ERR_INVALID_POLICY);
    expect_error([&] { a.compact(); }, LLS_ERR_NOTHING_TO_COMPACT);
    expect_error([&] { llmsession::render("no-such-format", "{}", 0); }, LLS_ERR_INVALID_INPUT);
    expect_error([] { llmsession::verify_file("/nonexistent/llmsession.jsonl"); }, LLS_ERR_STORAGE);
    a.dispose();
    expect_error([&] { a.start_turn(user("late")); }, LLS_ERR_DISPOSED);
    EXPECT_STREQ(Error::kind_name(LLS_ERR_REPLY_STATE), "reply-state");
    EXPECT_STREQ(Error::kind_name(12345), "unknown");
}

TEST_F(Binding, MovedFromObjectsRefuseUse) {
    Session s = Session::memory();
    Session t = std::move(s);
    EXPECT_FALSE(static_cast<bool>(s));
    EXPECT_TRUE(static_cast<bool>(t));
    EXPECT_THROW(s.id(), std::logic_error);
    Cancel c;
    Cancel d = std::move(c);
    EXPECT_THROW(c.trip(), std::logic_error);
    EXPECT_FALSE(d.is_tripped());
}

TEST_F(Binding, RaiiFreesEveryHandle) {
    std::size_t base = llmsession::live_handle_count();
    {
        Session s = Session::memory(R"({"id":"raii"})");
        EXPECT_EQ(s.id(), "raii");
        Cancel c;
        EXPECT_GT(llmsession::live_handle_count(), base);
        {
            Agent a(s, kOpts);
            a.add_prefix_listener([](std::string_view in) { return json::parse(in)["rest"].dump(); });
            a.set_summariser([](std::string_view) { return std::string(R"({"text":"s"})"); });
            a.start_turn(user("hello"));
            a.next_request(c);
            a.record_response(answer("hi"));
            a.end_turn();
            Agent moved = std::move(a);
            EXPECT_EQ(json::parse(moved.stats())["requests"], 1);
        }
        Session f = s.fork(R"({"id":"raii-fork"})");
        Session g = Session::memory();
        g = std::move(f); // frees the earlier session of g
        EXPECT_EQ(g.id(), "raii-fork");
        json events = json::parse(s.events());
        EXPECT_GT(events.size(), 3u);
        EXPECT_EQ(json::parse(s.verify())["requests"], 1);
        // Errors thrown and caught free their lls_error.
        for (int i = 0; i < 10; ++i) {
            EXPECT_THROW(Session::memory("["), Error);
        }
    }
    EXPECT_EQ(llmsession::live_handle_count(), base);
}

TEST_F(Binding, AdoptAndRelease) {
    Session s = Session::memory();
    lls_session *raw = s.release();
    EXPECT_FALSE(static_cast<bool>(s));
    Session back(raw);
    EXPECT_FALSE(back.id().empty());
}

TEST_F(Binding, FileSessionAndVerifyFile) {
    std::string path = testing::TempDir() + "/llmsession-cpp-file-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".jsonl";
    std::remove(path.c_str());
    {
        Session s = Session::open_file(path, R"({"id":"file-session"})");
        Agent a(s, kOpts);
        a.start_turn(user("to disk"));
        a.next_request();
        a.record_response(answer("stored"));
        a.end_turn();
        s.sync();
    }
    json report = json::parse(llmsession::verify_file(path));
    EXPECT_EQ(report["requests"], 1);
    Session again = Session::open_file(path);
    EXPECT_EQ(again.id(), "file-session");
    EXPECT_EQ(json::parse(again.load_report())["cutRecords"], 0);
    EXPECT_NE(again.history().find("stored"), std::string::npos);
    std::remove(path.c_str());
}

TEST_F(Binding, CheckpointsAndADirectoryListing) {
    std::string dir = testing::TempDir() + "/llmsession-cpp-cp-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed());
    std::string path = dir + "/s.jsonl";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    std::string events;
    {
        Session s = Session::open_file(path, R"({"id":"cp","checkpoints":{"everyEvents":3}})");
        for (int i = 0; i < 10; i++) s.append(R"({"type":"host/note","data":{}})");
        events = s.events();
        int n = 0;
        for (std::size_t at = 0; (at = events.find("\"type\":\"session/checkpoint\"", at)) != std::string::npos; ++at) n++;
        EXPECT_EQ(n, 3);
        expect_error([&] { s.append(R"({"type":"session/checkpoint","data":{}})"); }, LLS_ERR_INVALID_INPUT);
    }
    for (const char *opts : {R"({"check":"bounded"})", R"({"check":"full"})"}) {
        Session r = Session::open_file(path, opts);
        EXPECT_EQ(r.events(), events) << opts;
        r.verify();
    }
    expect_error([&] { Session::open_file(path, R"({"check":"sideways"})"); }, LLS_ERR_INVALID_INPUT);
    json list = json::parse(llmsession::list_sessions("file:" + dir));
    ASSERT_EQ(list.size(), 1u);
    EXPECT_EQ(list[0]["id"], "cp");
    EXPECT_EQ(list[0]["events"], 13);
    std::filesystem::remove_all(dir);
}

TEST_F(Binding, HostStoreSession) {
    auto records = std::make_shared<std::vector<std::string>>();
    auto store = [records](std::string_view in) {
        json req = json::parse(in);
        if (req["op"] == "load") {
            return json{{"records", *records}}.dump();
        }
        if (req["op"] == "append") {
            if (req.contains("header")) {
                records->push_back(req["header"]);
            }
            for (const auto &r : req["records"]) {
                records->push_back(r);
            }
        }
        return std::string("true");
    };
    {
        Session s = Session::open_store(std::function<std::string(std::string_view)>(store),
                                        R"({"id":"stored"})");
        s.append(json{{"type", "host/note"}, {"data", {{"text", "remember"}}}}.dump());
    }
    EXPECT_EQ(records->size(), 2u);
    Session s = Session::open_store(std::function<std::string(std::string_view)>(store));
    EXPECT_EQ(s.id(), "stored");
    EXPECT_EQ(json::parse(s.events()).size(), 1u);

    // A store that throws: the append fails, and the host exception comes back out.
    Session failing = Session::open_store(llmsession::Callback([](std::string_view in, Reply &r) {
        json req = json::parse(in);
        if (req["op"] == "append" && req["records"].dump().find("host/note") != std::string::npos) {
            throw MyHostError("disk on fire");
        }
        r.complete(R"({"records":[]})");
    }));
    EXPECT_THROW(failing.append(R"({"type":"host/note","data":{}})"), MyHostError);
    EXPECT_EQ(json::parse(failing.events()).size(), 0u);
}

TEST_F(Binding, OneWriterPerFileAndTypedStorageErrors) {
    std::string path = ::testing::TempDir() + "llmsession-cpp-writer-" + std::to_string(::getpid()) + ".jsonl";
    std::remove(path.c_str());
    Session writer = Session::open_file(path);
    // A second writer: LockedError, naming the file.
    try {
        Session::open_file(path);
        FAIL() << "a second writer was allowed";
    } catch (const llmsession::LockedError &e) {
        EXPECT_EQ(e.status(), LLS_ERR_LOCKED);
        EXPECT_STREQ(e.kind(), "locked");
        EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
    }
    // A reader follows the writer and refuses writes.
    Session reader = Session::open_file(path, R"({"readOnly":true})");
    EXPECT_THROW(reader.append(R"({"type":"host/note","data":{}})"), llmsession::ReadOnlyError);
    writer.append(R"({"type":"host/note","data":{"n":1}})");
    EXPECT_EQ(reader.refresh(), 1u);
    EXPECT_EQ(reader.events(), writer.events());
    // A host store that refuses a stale append: ConflictError, and nothing more until refresh.
    auto records = std::make_shared<std::vector<std::string>>();
    auto conflict = std::make_shared<bool>(false);
    Session hosted = Session::open_store(std::function<std::string(std::string_view)>([records, conflict](std::string_view in) {
        json req = json::parse(in);
        if (req["op"] == "load") {
            return json{{"records", *records}}.dump();
        }
        if (req["op"] == "append") {
            if (*conflict) {
                return std::string(R"({"conflict":"another worker wrote it"})");
            }
            if (req.contains("header")) {
                records->push_back(req["header"]);
            }
            for (const auto &r : req["records"]) {
                records->push_back(r);
            }
        }
        return std::string("true");
    }));
    *conflict = true;
    EXPECT_THROW(hosted.append(R"({"type":"host/note","data":{}})"), llmsession::ConflictError);
    *conflict = false;
    EXPECT_THROW(hosted.append(R"({"type":"host/note","data":{}})"), llmsession::ConflictError);
    EXPECT_EQ(hosted.refresh(), 0u);
    EXPECT_EQ(hosted.append(R"({"type":"host/note","data":{}})"), 0u);
    EXPECT_EQ(hosted.export_jsonl().size() > 0, true);
    std::remove(path.c_str());
}

TEST_F(Binding, ListenerExceptionIsRethrownAsItself) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    a.add_prefix_listener([](std::string_view) -> std::string { throw MyHostError("catalogue down"); });
    a.start_turn(user("hi"));
    try {
        a.next_request();
        FAIL() << "expected MyHostError";
    } catch (const MyHostError &e) {
        EXPECT_STREQ(e.what(), "catalogue down");
    }
    // The library saw a listener failure with the exception's message, and ended the turn.
    json events = json::parse(s.events());
    EXPECT_EQ(events.back()["type"], "turn/end");
    EXPECT_EQ(events.back()["data"]["reason"], "error");
}

TEST_F(Binding, ExplicitFailureIsAnError) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    a.add_pre_step_listener(llmsession::Callback([](std::string_view, Reply &r) { r.fail("no go"); }));
    a.start_turn(user("hi"));
    Error e = expect_error([&] { a.next_request(); }, LLS_ERR_LISTENER);
    EXPECT_NE(e.message().find("no go"), std::string::npos);
}

TEST_F(Binding, UnansweredAndDroppedReplies) {
    // Returning without answering fails the call with a message that says so.
    Error e = expect_error(
        [] { llmsession::invoke_callback([](std::string_view, Reply &) {}, "{}"); }, LLS_ERR_LISTENER);
    EXPECT_NE(e.message().find("without answering"), std::string::npos);
    // A reply moved out and destroyed unanswered fails the call ("dropped").
    e = expect_error(
        [] {
            llmsession::invoke_callback([](std::string_view, Reply &r) { Reply gone = std::move(r); }, "{}");
        },
        LLS_ERR_LISTENER);
    EXPECT_NE(e.message().find("dropped"), std::string::npos);
    // Answering twice is a logic error of the host; the first answer stands.
    std::string out = llmsession::invoke_callback(
        [](std::string_view, Reply &r) {
            r.complete("1");
            EXPECT_FALSE(r.valid());
            EXPECT_THROW(r.complete("2"), std::logic_error);
        },
        "{}");
    EXPECT_EQ(out, "1");
    // Garbage is reported to the callback (an Error) and to the call (a listener failure).
    e = expect_error(
        [] {
            llmsession::invoke_callback(
                [](std::string_view, Reply &r) { EXPECT_THROW(r.complete("{oops"), Error); }, "{}");
        },
        LLS_ERR_LISTENER);
    EXPECT_EQ(json::parse(e.detail())["callback"], "malformed-json");
    // Left uncaught, the callback's Error is what the call rethrows.
    e = expect_error(
        [] { llmsession::invoke_callback([](std::string_view, Reply &r) { r.complete("\xff"); }, "{}"); },
        LLS_ERR_INVALID_UTF8);
}

TEST_F(Binding, InvokeCallbackSyncAndFromThread) {
    std::string out = llmsession::invoke_callback(
        [](std::string_view in, Reply &r) { r.complete(json{{"echo", json::parse(in)}}.dump()); },
        R"({"x":1})");
    EXPECT_EQ(json::parse(out)["echo"]["x"], 1);

    std::thread worker;
    std::thread::id caller = std::this_thread::get_id();
    std::thread::id answered_on;
    out = llmsession::invoke_callback(
        [&](std::string_view in, Reply &r) {
            EXPECT_EQ(std::this_thread::get_id(), caller);
            std::string copy(in);
            worker = std::thread([&answered_on, copy, reply = std::move(r)]() mutable {
                answered_on = std::this_thread::get_id();
                reply.complete(copy);
            });
        },
        R"([1,2,3])");
    worker.join();
    EXPECT_EQ(out, "[1,2,3]");
    EXPECT_NE(answered_on, caller);
}

TEST_F(Binding, SummariserCompletesFromAnotherThread) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    std::thread::id caller = std::this_thread::get_id();
    std::atomic<bool> other_thread{false};
    std::vector<std::thread> workers;
    a.set_summariser(llmsession::Callback([&](std::string_view in, Reply &r) {
        json input = json::parse(in);
        EXPECT_EQ(input["request"]["purpose"], "compaction");
        workers.emplace_back([&, reply = std::move(r)]() mutable {
            other_thread = std::this_thread::get_id() != caller;
            reply.complete(R"({"text":"The user said alpha many times."})");
        });
    }));
    one_long_turn(a);
    json out = json::parse(a.compact());
    for (auto &w : workers) {
        w.join();
    }
    EXPECT_EQ(out["outcome"], "landed");
    EXPECT_TRUE(other_thread.load());
    EXPECT_NE(s.history().find("alpha many times"), std::string::npos);
    EXPECT_EQ(s.history().find("alpha alpha"), std::string::npos);
}

TEST_F(Binding, SummariserReturningAFuture) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    std::function<std::future<std::string>(std::string_view)> summarise = [](std::string_view) {
        return std::async(std::launch::async, [] { return std::string(R"({"text":"async summary"})"); });
    };
    a.set_summariser(summarise);
    one_long_turn(a);
    EXPECT_EQ(json::parse(a.compact())["outcome"], "landed");
    EXPECT_NE(s.history().find("async summary"), std::string::npos);

    // A future that holds an exception: the compaction fails and the exception comes out.
    a.set_summariser(std::function<std::future<std::string>(std::string_view)>([](std::string_view) {
        return std::async(std::launch::async, []() -> std::string { throw MyHostError("model offline"); });
    }));
    a.start_turn(user(long_text("beta ", 400)));
    a.next_request();
    a.record_response(answer("ok"));
    a.end_turn();
    EXPECT_THROW(a.compact(), MyHostError);
}

TEST_F(Binding, CancellingAPendingSummariser) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    std::mutex m;
    std::condition_variable cv;
    Reply held; // empty until the summariser moves its reply here
    a.set_summariser(llmsession::Callback([&](std::string_view, Reply &r) {
        std::lock_guard<std::mutex> lock(m);
        held = std::move(r); // pending: nobody answers until after the cancel
        cv.notify_all();
    }));
    one_long_turn(a);
    Cancel cancel;
    std::thread tripper([&] {
        std::unique_lock<std::mutex> lock(m);
        cv.wait(lock, [&] { return held.valid(); });
        cancel.trip();
    });
    Error e = expect_error([&] { a.compact({}, &cancel); }, LLS_ERR_CANCELLED);
    tripper.join();
    EXPECT_TRUE(cancel.is_tripped());
    // The abandoned reply is still answered (accepted and discarded), so nothing leaks.
    ASSERT_TRUE(held.valid());
    held.complete(R"({"text":"too late"})");
    EXPECT_FALSE(held.valid());
    EXPECT_EQ(s.history().find("too late"), std::string::npos);
}

TEST_F(Binding, TrippedTokenCancelsRequest) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    std::thread worker;
    a.add_prefix_listener(llmsession::Callback([&](std::string_view, Reply &r) {
        worker = std::thread([reply = std::move(r)]() mutable { reply.complete("[]"); });
    }));
    a.start_turn(user("hi"));
    Cancel c;
    c.trip();
    expect_error([&] { a.next_request(c); }, LLS_ERR_CANCELLED);
    if (worker.joinable()) {
        worker.join();
    }
    json events = json::parse(s.events());
    EXPECT_EQ(events.back()["data"]["reason"], "aborted");
}

TEST_F(Binding, TokenCounterAndMeasure) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    std::atomic<int> calls{0};
    a.set_token_counter([&](std::string_view) {
        ++calls;
        return std::uint64_t{7};
    });
    a.start_turn(user("count me"));
    json m = json::parse(a.measure());
    EXPECT_EQ(m["counter"], "host");
    EXPECT_GT(calls.load(), 0);
    a.set_token_counter([](std::string_view) -> std::uint64_t { throw MyHostError("counter broke"); });
    EXPECT_THROW(a.measure(), MyHostError);
    a.clear_token_counter();
    EXPECT_EQ(json::parse(a.measure())["counter"], "estimate");
}

TEST_F(Binding, DisposeFromInsideAListener) {
    Session s = Session::memory();
    std::optional<Agent> a(std::in_place, s, kOpts);
    a->add_prefix_listener(llmsession::Callback([&](std::string_view in, Reply &r) {
        a->dispose();
        r.complete(json::parse(in)["rest"].dump());
    }));
    a->start_turn(user("hi"));
    expect_error([&] { a->next_request(); }, LLS_ERR_DISPOSED);
    a.reset();
    Agent next(s, kOpts); // the session is free again
    EXPECT_EQ(json::parse(s.events()).back()["data"]["reason"], "disposed");
}

TEST_F(Binding, NextRequestHandsOverTheLibraryBuffer) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    a.start_turn(user("hi"));
    llmsession::OwnedString env = a.next_request();
    json info = json::parse(a.request_info());
    EXPECT_EQ(env.size(), info["bytes"].get<std::size_t>());
    EXPECT_EQ(env.c_str()[env.size()], '\0');
    std::string copy = env.str();
    EXPECT_EQ(env, copy);
    EXPECT_EQ(std::string_view(env), copy);
    EXPECT_EQ(json::parse(env)["messages"][0]["content"][0]["text"], "hi");
    llmsession::OwnedString moved = std::move(env);
    EXPECT_TRUE(env.empty());
    EXPECT_STREQ(env.c_str(), "");
    EXPECT_EQ(moved, copy);
    std::string converted = moved; // the implicit copy existing code relies on
    EXPECT_EQ(converted, copy);
    a.record_response(answer("done"));
    a.end_turn();
}

TEST_F(Binding, InjectProviderErrorAndRender) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    a.start_turn(user("hi"));
    std::string env = a.next_request();
    EXPECT_FALSE(a.inject(user("deferred")).has_value());
    EXPECT_FALSE(a.provider_error(R"({"message":"503"})"));
    env = a.next_request();
    json info = json::parse(a.request_info());
    json body = json::parse(llmsession::render("anthropic", env, info["prefixLen"].get<std::size_t>()));
    EXPECT_TRUE(body.contains("messages"));
    a.record_response(answer("done"));
    a.end_turn();
    EXPECT_TRUE(a.inject(user("now")).has_value());
    EXPECT_EQ(a.prefix(), "[]");
    EXPECT_FALSE(json::parse(s.header()).is_null());
    EXPECT_EQ(json::parse(s.info())["id"], s.id());
    EXPECT_EQ(json::parse(s.stats())["requests"], 2);
}

TEST_F(Binding, ParsedResponseIsRecordedAsItIs) {
    Session s = Session::memory();
    Agent a(s, kOpts);
    a.start_turn(user("hi"));
    std::string env = a.next_request();
    EXPECT_EQ(a.prefix_len(), json::parse(a.request_info())["prefixLen"].get<std::size_t>());
    std::string body = R"({"model":"smol","choices":[{"finish_reason":"stop","message":{"role":"assistant","content":"Hello!"}}],)"
                       R"("usage":{"prompt_tokens":30,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":20}}})";
    json parsed = json::parse(llmsession::parse_response("openai", body));
    EXPECT_EQ(parsed["finishReason"], "stop");
    EXPECT_EQ(parsed["usage"]["cacheReadTokens"], 20);
    EXPECT_GT(a.record_response(parsed.dump()), 0u);
    a.end_turn();
    EXPECT_EQ(json::parse(s.verify())["requests"], 1);
    EXPECT_EQ(json::parse(llmsession::usage_from_provider("anthropic", R"({"input_tokens":5,"output_tokens":2})"))["inputTokens"], 5);
    EXPECT_TRUE(llmsession::is_context_overflow(400, R"({"error":{"code":"context_length_exceeded"}})"));
    EXPECT_FALSE(llmsession::is_context_overflow(429, "too many tokens per minute"));
    expect_error([&] { llmsession::parse_response("cohere", body); }, LLS_ERR_INVALID_INPUT);
    expect_error([&] { llmsession::parse_response("openai", R"({"choices":)"); }, LLS_ERR_MALFORMED_JSON);
    expect_error([&] { a.record_response(R"({"message":{"role":"assistant","content":[]},"finishReason":1})"); },
                 LLS_ERR_INVALID_INPUT);
}

/// Two turns against `provider` (a scripted answer, or a replay).
void cache_host(Session &s, const std::string &system, const std::function<std::string(const std::string &)> &provider) {
    Agent a(s, json{{"config", {{"provider", "openai"}, {"model", "gpt-5"}}}, {"system", system}}.dump());
    for (const char *u : {"first", "second"}) {
        a.start_turn(user(u));
        std::string env = a.next_request();
        std::string resp;
        try {
            resp = provider(env);
        } catch (...) {
            a.end_turn("error");
            throw;
        }
        a.record_response(resp);
        a.end_turn();
    }
}

std::string scripted(const std::string &) {
    return R"({"message":{"role":"assistant","content":[{"type":"text","text":"ok"}]},"usage":{"inputTokens":10,"outputTokens":2,"cacheReadTokens":90}})";
}

TEST_F(Binding, RenderWithOptions) {
    std::string env = R"({"provider":"openai","model":"m","system":"S","messages":[{"role":"user","content":[{"type":"text","text":"q"}]}],"sessionId":"sess-1","purpose":"conversation"})";
    EXPECT_EQ(json::parse(llmsession::render_with_options("openai", env))["prompt_cache_key"], "sess-1");
    EXPECT_FALSE(json::parse(llmsession::render_with_options("openai", env, R"({"promptCacheKey":false})")).contains("prompt_cache_key"));
    json custom = json::parse(llmsession::render_with_options("openai", env, R"({"promptCacheKey":"tenant","promptCacheRetention":"24h"})"));
    EXPECT_EQ(custom["prompt_cache_key"], "tenant");
    EXPECT_EQ(custom["prompt_cache_retention"], "24h");
    json a = json::parse(llmsession::render_with_options("anthropic", env, R"({"cacheTtl":"1h"})"));
    EXPECT_EQ(a["system"][0]["cache_control"], json({{"type", "ephemeral"}, {"ttl", "1h"}}));
    EXPECT_EQ(a["messages"][0]["content"][0]["cache_control"], json({{"type", "ephemeral"}, {"ttl", "1h"}}));
    Error e = expect_error([&] { llmsession::render_with_options("anthropic", env, R"({"cacheTtl":"2h"})"); }, LLS_ERR_INVALID_INPUT);
    EXPECT_NE(e.message().find("options.cacheTtl"), std::string::npos) << e.message();
}

TEST_F(Binding, ExplainAndReplay) {
    std::string path = testing::TempDir() + "/llmsession-cpp-replay-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + ".jsonl";
    std::remove(path.c_str());
    {
        Session s = Session::open_file(path, R"({"id":"rec-1"})");
        cache_host(s, "Be brief.", scripted);
        json ex = json::parse(s.explain());
        ASSERT_EQ(ex["requests"].size(), 2u);
        EXPECT_TRUE(ex["requests"][1]["extends"].get<bool>());
        // The second request sends nothing new: the 10 tokens the server did not read are below
        // the provider's 1024-token minimum cacheable size.
        EXPECT_EQ(ex["requests"][1]["cause"], "below-minimum");
        EXPECT_EQ(ex["totals"]["spend"]["growth"], 10);
        EXPECT_EQ(ex["totals"]["spend"]["below-minimum"], 10);
        expect_error([&] { s.explain(R"({"tokenizer":"/nonexistent/tokenizer.json"})"); }, LLS_ERR_TOKENIZER);
    }
    EXPECT_EQ(json::parse(llmsession::explain_file(path))["totals"]["conversationRequests"], 2);

    // The same loop offline, answered by the recording.
    llmsession::Replay replay = llmsession::Replay::open_file(path);
    Session offline = Session::memory(R"({"id":"rec-1"})");
    cache_host(offline, "Be brief.", [&](const std::string &env) {
        json ans = json::parse(replay.answer(env));
        EXPECT_EQ(ans["outcome"], "response");
        return ans["response"].dump();
    });
    EXPECT_EQ(json::parse(replay.info())["answered"], 2);
    EXPECT_EQ(json::parse(offline.verify())["requests"], 2);

    // Another system prompt: the first request differs, at system line 1.
    llmsession::Replay again = llmsession::Replay::of(offline);
    Session other = Session::memory(R"({"id":"rec-1"})");
    Error e = expect_error([&] { cache_host(other, "Be very brief.", [&](const std::string &env) { return again.answer(env); }); },
                           LLS_ERR_RECONSTRUCTION);
    json d = json::parse(e.detail());
    EXPECT_EQ(d["component"], "system");
    EXPECT_EQ(d["request"], "1");
    EXPECT_NE(e.message().find("differs from the recorded one at system line 1"), std::string::npos) << e.message();
    expect_error([&] { llmsession::Replay::open_file(path + ".missing"); }, LLS_ERR_STORAGE);
    std::remove(path.c_str());
}

} // namespace
