#pragma once
// The meaning of every scenario key (issue 17 item 1): for each row of the registry
// (scenarios/keys.hpp), its parser and validator, where its value lands in a case, its part of
// Case::key() and its columns of the HDF5 row. The expansion (sim/sweep/expand.cpp) crosses the
// keys' values through `apply` in registry order, Case::key() joins `key` in kCaseKeyOrder, and
// the row template fills each key's columns through `row`: none of them lists the keys again.
#include <array>
#include <string>
#include <vector>

#include "results/store.hpp"
#include "scenarios/keys.hpp"
#include "sim/sweep/case.hpp"

namespace fp8moe::scenarios {

// One element of a scenario's product while it is built: the case, and the choices that are
// resolved only once every key is known (placements need the mesh, routing the seed, `pad = auto`
// the offsets).
struct Proto {
  Case c;
  std::string lhs = "all", rhs = "all", filter = "direct";  // op placements and the verdict filter
  bool offs_explicit = false;
  bool pad_auto = false;
};

struct KeyRule {
  // Checks one value of the key and returns the values it stands for (a seed range `0..3`,
  // `pass = all`, a mode naming both promotion families); an Error says why it is invalid (the
  // caller names the file and line).
  std::vector<std::string> (*values)(const std::string& text);
  // Lands one value (as `values` returned it) in the element.
  void (*apply)(Proto& p, const std::string& value);
  // Its part of Case::key(), empty when the case does not use the key.
  std::string (*key)(const Case& c);
  // Its columns of the case's HDF5 row (results/store.hpp); none for some keys.
  void (*row)(const Case& c, results::CaseRow& r);
};

const KeyRule& key_rule(Key k);

// The order of the parts of Case::key(): the keys that say what runs where first (every
// baseline's keys are in this order).
extern const std::array<Key, kKeyCount> kCaseKeyOrder;

// Helpers the rules and the cross-key checks share.
std::vector<std::int32_t> parse_offs(const std::string& s);
bool plan_has(const std::string& plan, const char* part);
std::string offs_text(const std::vector<std::int32_t>& offs);

}  // namespace fp8moe::scenarios
