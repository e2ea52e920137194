// Every scenario file in tests/scenarios/ (and in $LLMSESSION_SCENARIOS; or only
// $LLMSESSION_SCENARIO_FILE), each a test, through the C++ binding.
#include "scenario_runner.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <dirent.h>

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

} // namespace
