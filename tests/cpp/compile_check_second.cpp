// A second translation unit including llmsession.hpp (see compile_check.cpp).
#include "llmsession.hpp"

std::string second_unit_version() { return llmsession::version(); }
