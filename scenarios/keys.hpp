#pragma once
// The scenario key registry (issue 17 item 1): one row per key a scenario may set. Its columns
// are the key's syntax, which this layer owns: how a raw value splits into a list, the built-in
// default, and which level uses it. The key's meaning (its parser and validator, where its value
// lands in a case, its part of the case key and its HDF5 columns) is the row of the same name in
// sim/sweep/case_keys.cpp, which the compiler holds to this list (its table is built from this
// X-macro: a key without a rule_NAME() there does not compile). Adding a key is one row here, its
// rule there, and the code that uses the value.
//
// The order is the order the axes of a scenario expand in, outermost first: it fixes case ids.
//
//   split: list  values split on ',' and ';' (`mode = exact, hp64`)
//          tuple one value contains commas: split on ';' or repeat the key (`mesh = dp=2,tp=2`)
//          text  the whole value is one string (`description`)
//   scope: both, op, layer: the levels the key applies to (a key outside its level's scope is
//          normalised away, so that it does not multiply cases)
#include <array>
#include <cstddef>
#include <string_view>

namespace fp8moe::scenarios {

//        name           split  default                scope
#define FP8MOE_SCENARIO_KEYS(X)                                      \
  X(description,   text,  "",                    both)             \
  X(level,         list,  "op",                  both)             \
  X(mesh,          tuple, "1",                   both)             \
  X(plan,          list,  "all",                 layer)            \
  X(pass,          list,  "all",                 op)               \
  X(lhs,           tuple, "all",                 op)               \
  X(rhs,           tuple, "all",                 op)               \
  X(placements,    list,  "direct",              op)               \
  X(mode,          list,  "promote-fp32:cublas", both)             \
  X(backend,       list,  "reference",           both)             \
  X(experts,       list,  "2",                   both)             \
  X(tokens,        list,  "256",                 both)             \
  X(offs,          tuple, "none",                both)             \
  X(n,             list,  "256",                 op)               \
  X(k,             list,  "256",                 op)               \
  X(dim,           list,  "256",                 layer)            \
  X(hidden,        list,  "256",                 layer)            \
  X(inputs,        tuple, "none",                both)             \
  X(routing,       list,  "balanced",            both)             \
  X(empty_experts, tuple, "none",                both)             \
  X(dist,          list,  "normal",              both)             \
  X(seed,          list,  "0",                   both)             \
  X(format,        list,  "e4m3",                both)             \
  X(block,         list,  "128",                 both)             \
  X(pow2_scales,   list,  "false",               both)             \
  X(pad,           list,  "auto",                both)             \
  X(out_dtype,     list,  "bf16",                both)             \
  X(fsdp_gather,   list,  "bf16",                layer)            \
  X(reduce_dtype,  list,  "fp32",                both)             \
  X(reduce_order,  list,  "ascending",           both)             \
  X(fp8_dispatch,  list,  "false",               layer)            \
  X(lr,            list,  "0",                   layer)

enum class Split : unsigned char { list, tuple, text };
enum class Scope : unsigned char { both, op, layer };

enum class Key : unsigned char {
#define FP8MOE_KEY_ENUM(name, split, dflt, scope) name,
  FP8MOE_SCENARIO_KEYS(FP8MOE_KEY_ENUM)
#undef FP8MOE_KEY_ENUM
};

struct KeySyntax {
  Key key;
  std::string_view name;
  Split split;
  std::string_view builtin;  // the value when neither the scenario nor [defaults] sets the key
  Scope scope;
};

inline constexpr std::array kKeys{
#define FP8MOE_KEY_ROW(name, split, dflt, scope) KeySyntax{Key::name, #name, Split::split, dflt, Scope::scope},
    FP8MOE_SCENARIO_KEYS(FP8MOE_KEY_ROW)
#undef FP8MOE_KEY_ROW
};
inline constexpr std::size_t kKeyCount = kKeys.size();

constexpr const KeySyntax& syntax(Key k) { return kKeys[static_cast<std::size_t>(k)]; }
constexpr std::string_view key_name(Key k) { return syntax(k).name; }

// The row of `name`, or nullptr when no key has that name.
const KeySyntax* find_key(std::string_view name);

}  // namespace fp8moe::scenarios
