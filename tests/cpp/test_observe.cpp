// The C++ observer hook (llmsession::set_observer, docs/observe.md): a cut tail reaches a
// std::function as an Observation; the level filters; clearing destroys the function once; an
// exception in the observer stays inside it. The observer is process-wide: each test restores
// the silent default.
#include "llmsession.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using json = nlohmann::json;
using llmsession::Level;
using llmsession::Observation;
using llmsession::Session;

namespace {

std::string temp_dir() {
    char tmpl[] = "/tmp/lls-cpp-observe-XXXXXX";
    const char *d = mkdtemp(tmpl);
    EXPECT_NE(d, nullptr);
    return d ? d : "/tmp";
}

// A log with one host event and a torn last line: opening it cuts one record.
std::string torn_log(const std::string &dir, const std::string &id) {
    std::string path = dir + "/torn.jsonl";
    {
        Session s = Session::open_file(path, json{{"id", id}}.dump());
        s.append(R"({"type":"host/note","data":{}})");
    }
    std::ofstream(path, std::ios::app) << R"({"type":"host/no)";
    return path;
}

void append_torn(const std::string &path) { std::ofstream(path, std::ios::app) << "{"; }

struct Restore {
    ~Restore() { llmsession::clear_observer(); }
};

} // namespace

TEST(Observer, ACutTailArrivesAsAnObservation) {
    Restore restore;
    std::string dir = temp_dir();
    std::string path = torn_log(dir, "cpp-observe-cut");
    std::mutex mu;
    std::vector<Observation> seen;
    llmsession::set_observer(
        [&](const Observation &o) {
            if (o.session_id == "cpp-observe-cut") {
                std::lock_guard<std::mutex> lock(mu);
                seen.push_back(o);
            }
        },
        Level::warn);
    { Session s = Session::open_file(path); }
    ASSERT_EQ(seen.size(), 1u);
    const Observation &o = seen[0];
    EXPECT_EQ(o.kind, "log-cut");
    EXPECT_EQ(o.level, Level::warn);
    EXPECT_STREQ(llmsession::level_name(o.level), "warn");
    EXPECT_NE(o.message.find("cut 1 record"), std::string::npos) << o.message;
    json j = json::parse(o.json);
    EXPECT_EQ(j["kind"], "log-cut");
    EXPECT_EQ(j["records"], 1);
    EXPECT_EQ(j["message"], o.message);
    EXPECT_EQ(j["sessionId"], "cpp-observe-cut");
    std::ifstream saved(j["savedTo"].get<std::string>());
    std::string tail((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
    EXPECT_EQ(tail, R"({"type":"host/no)");
    std::system(("rm -rf " + dir).c_str());
}

TEST(Observer, TheLevelFiltersAndClearingDestroysTheFunctionOnce) {
    Restore restore;
    std::string dir = temp_dir();
    std::string path = torn_log(dir, "cpp-observe-quiet");
    auto alive = std::make_shared<int>(0);
    std::weak_ptr<int> watch = alive;
    int calls = 0;
    llmsession::set_observer([&calls, alive](const Observation &) { calls++; }, Level::error);
    alive.reset();
    EXPECT_FALSE(watch.expired()) << "the library holds the observer";
    { Session s = Session::open_file(path); } // log-cut is a warning
    EXPECT_EQ(calls, 0);
    llmsession::clear_observer();
    EXPECT_TRUE(watch.expired()) << "clearing destroys the observer";
    append_torn(path);
    { Session s = Session::open_file(path); }
    EXPECT_EQ(calls, 0);
    EXPECT_THROW(llmsession::set_observer([](const Observation &) {}, static_cast<Level>(7)),
                 llmsession::Error);
    std::system(("rm -rf " + dir).c_str());
}

TEST(Observer, AnExceptionStaysInsideTheObserver) {
    Restore restore;
    std::string dir = temp_dir();
    std::string path = torn_log(dir, "cpp-observe-throw");
    llmsession::set_observer([](const Observation &) { throw std::runtime_error("observer bug"); },
                             Level::debug);
    EXPECT_NO_THROW({ Session s = Session::open_file(path); });
    std::system(("rm -rf " + dir).c_str());
}

TEST(Observer, EscapedTextIsDecoded) {
    std::string text =
        R"({"kind":"x","level":"warn","message":"a \"q\" \\ \u00e9 \ud83d\ude00\n","sessionId":"s"})";
    EXPECT_EQ(llmsession::detail::observation_string(text, "message"),
              "a \"q\" \\ \xc3\xa9 \xf0\x9f\x98\x80\n");
    EXPECT_EQ(llmsession::detail::observation_string(text, "sessionId"), "s");
    EXPECT_EQ(llmsession::detail::observation_string(text, "absent"), "");
}
