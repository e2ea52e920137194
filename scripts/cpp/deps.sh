#!/usr/bin/env bash
# `make cpp-deps`: nlohmann/json (Debian's package), which the C++ tests read the scenario files
# with, installed with apt-get when its header is missing (GoogleTest comes with the machine).
set -euo pipefail
if [ ! -f /usr/include/nlohmann/json.hpp ]; then
    echo "test-cpp: installing nlohmann-json3-dev"
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get install -y nlohmann-json3-dev || { $sudo apt-get update -qq && $sudo apt-get install -y nlohmann-json3-dev; }
fi
