// Every scenario file in tests/scenarios/ (and in $LLMSESSION_SCENARIOS; or only
// $LLMSESSION_SCENARIO_FILE), each a test, through the C++ binding.
#include "scenario_runner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <dirent.h>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#ifndef LLMSESSION_SCENARIO_DIR
#error "LLMSESSION_SCENARIO_DIR must name tests/scenarios"
#endif

namespace {

std::vector<std::string> json_files(const std::string &dir) {
    std::vector<std::string> out;
    DIR *d = opendir(dir.c_str());
    if (d == nullptr) {
        std::fprintf(stderr, "cannot read the scenario directory %s\n", dir.c_str());
        return out;
    }
    while (dirent *e = readdir(d)) {
        std::string name = e->d_name;
        if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) {
            out.push_back(dir + "/" + name);
        }
    }
    closedir(d);
    std::sort(out.begin(), out.end());
    return out;
}

std::vector<std::string> scenario_files() {
    if (const char *one = std::getenv("LLMSESSION_SCENARIO_FILE"); one && *one) {
        return {one};
    }
    std::vector<std::string> files = json_files(LLMSESSION_SCENARIO_DIR);
    if (const char *extra = std::getenv("LLMSESSION_SCENARIOS"); extra && *extra) {
        for (auto &f : json_files(extra)) {
            files.push_back(f);
        }
    }
    return files;
}

std::string test_name(const testing::TestParamInfo<std::string> &info) {
    std::string base = info.param.substr(info.param.find_last_of('/') + 1);
    base = base.substr(0, base.size() - 5);
    std::string out;
    for (char c : base) {
        out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    }
    return out + "_" + std::to_string(info.index);
}

class Scenario : public testing::TestWithParam<std::string> {};

TEST_P(Scenario, Passes) {
    std::size_t before = llmsession::live_handle_count();
    try {
        scenario::run_file(GetParam());
    } catch (const std::exception &e) {
        FAIL() << GetParam() << ": " << e.what();
    }
    EXPECT_EQ(llmsession::live_handle_count(), before) << "handles leaked by " << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Files, Scenario, testing::ValuesIn(scenario_files()), test_name);

TEST(ScenarioFiles, AreFound) { EXPECT_FALSE(scenario_files().empty()); }

TEST(Golden, FirstDifferenceNamesThePointer) {
    using golden::json;
    json a = json::parse(R"({"ops": [{"op": "turn"}, {"op": "request", "request": {"digest": "a"}}], "final": {}})");
    json b = a;
    EXPECT_EQ(golden::first_difference(&a, &b), std::nullopt);
    b["ops"][1]["request"]["digest"] = "b";
    EXPECT_EQ(golden::first_difference(&a, &b), "/ops/1/request/digest");
    b["ops"][0]["a/b~"] = 2;
    EXPECT_EQ(golden::first_difference(&a, &b), "/ops/0/a~1b~0");
    b = a;
    b["ops"].push_back(1);
    EXPECT_EQ(golden::first_difference(&a, &b), "/ops/2");
}

TEST(Golden, MasksAndNormalises) {
    golden::json v = {"/tmp/x/load-1.jsonl.cut-1712345678901", {{"k", "/tmp/x/a.cut-"}},
                      "prefix listener callback: host callback failed: listener failed",
                      "summariser callback: host callback failed: summariser unavailable"};
    golden::mask_strings(v, "/tmp/x");
    EXPECT_EQ(v, golden::json({"<dir>/load-1.jsonl.cut-<time>", {{"k", "<dir>/a.cut-"}}, "listener failed",
                               "summariser unavailable"}));
    golden::json r = golden::json::parse(R"({"a": {"$repeat": "ab", "times": 3}, "b": [{"$repeat": "x", "times": 0}]})");
    golden::expand(r);
    EXPECT_EQ(r, golden::json::parse(R"({"a": "ababab", "b": [""]})"));
}

TEST(Golden, CompareReportsTheOpAndAMissingFile) {
    char tmpl[] = "/tmp/llmsession-cpp-golden-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    std::string dir = tmpl;
    golden::json t = golden::json::parse(R"({"ops": [{"i": 0, "op": "turn", "outcome": "ok", "text": "abab"}]})");
    auto missing = golden::compare(dir + "/s.json", t, dir + "/out");
    ASSERT_TRUE(missing.has_value());
    EXPECT_NE(missing->find("is missing"), std::string::npos) << *missing;
    std::filesystem::create_directories(dir + "/golden");
    std::ofstream(dir + "/golden/s.json")
        << R"({"ops": [{"i": 0, "op": "turn", "outcome": "error", "text": {"$repeat": "ab", "times": 2}}]})";
    auto differs = golden::compare(dir + "/s.json", t, dir + "/out");
    ASSERT_TRUE(differs.has_value());
    EXPECT_NE(differs->find("at op 0 (turn), /ops/0/outcome"), std::string::npos) << *differs;
    EXPECT_NE(differs->find("expected: \"error\""), std::string::npos) << *differs;
    t["ops"][0]["outcome"] = "error";
    EXPECT_EQ(golden::compare(dir + "/s.json", t, dir + "/out"), std::nullopt);
    std::filesystem::remove_all(dir);
}

} // namespace
