#include "sim/mesh/placement.hpp"

#include <cctype>
#include <optional>

#include "reference/error.hpp"

namespace fp8moe::sim {

std::string Placement::str() const {
  switch (kind) {
    case Kind::replicate: return "R";
    case Kind::partial: return "P";
    case Kind::shard: return "S(" + std::to_string(dim) + ")";
  }
  return "?";
}

std::string Placement::dtensor() const {
  switch (kind) {
    case Kind::replicate: return "Replicate()";
    case Kind::partial: return "Partial(sum)";
    case Kind::shard: return "Shard(dim=" + std::to_string(dim) + ")";
  }
  return "?";
}

std::string dtensor_str(const Placements& p) {
  std::string s = "(";
  for (std::size_t i = 0; i < p.size(); ++i) s += (i ? ", " : "") + p[i].dtensor();
  return s + (p.size() == 1 ? ",)" : ")");
}

std::string str(const Placements& p) {
  std::string s = "[";
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i) s += ',';
    s += p[i].str();
  }
  return s + "]";
}

namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\"'");
  if (b == std::string::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\"'") - b + 1);
}

// One placement in fp8moe's spelling (R, P, S(d)) or DTensor's (Replicate(), Partial(),
// Partial(sum), Partial(reduce_op='sum'), Shard(d), Shard(dim=d)).
Placement parse_one(const std::string& name, const std::optional<std::string>& arg, const std::string& text) {
  const std::string a = arg ? trim(*arg) : std::string();
  if ((name == "R" && !arg) || (name == "Replicate" && arg && a.empty())) return Placement::R();
  if ((name == "P" && !arg) || (name == "Partial" && arg)) {
    const std::string op = a.rfind("reduce_op", 0) == 0 ? trim(a.substr(a.find('=') + 1)) : a;
    if (!op.empty() && op != "sum") {
      fail("placement '", name, "(", a, ")' in '", text, "': fp8moe models Partial sums only (DTensor's default); ", op,
           " is not modelled");
    }
    return Placement::P();
  }
  if ((name == "S" || name == "Shard") && arg) {
    const std::string d = a.rfind("dim", 0) == 0 ? trim(a.substr(a.find('=') + 1)) : a;
    std::size_t used = 0;
    int dim = -1;
    try {
      dim = std::stoi(d, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != d.size() || dim < 0) {
      fail("bad placement list '", text, "': ", name, "(", a, ") needs a tensor dim >= 0, e.g. ", name, "(1)");
    }
    return Placement::S(dim);
  }
  fail("bad placement list '", text, "': '", name, arg ? "(" + *arg + ")" : "", "' is not a placement: use R, P or S(d) ",
       "(or DTensor's Replicate(), Partial(), Shard(d)) per mesh dim, e.g. S(0),R");
}

}  // namespace

Placements parse_placements(const std::string& text, int mesh_ndim) {
  // A list as fp8moe writes it ("S(0),R", "[S(0),R]") or as DTensor prints it
  // ("(Shard(dim=0), Replicate())", "[Shard(0), Partial()]").
  std::string s = trim(text);
  if (!s.empty() && (s.front() == '[' || (s.front() == '(' && s.size() > 1 && std::isalpha(static_cast<unsigned char>(s[1]))))) {
    const char close = s.front() == '[' ? ']' : ')';
    if (s.back() != close) fail("bad placement list '", text, "': unclosed ", s.front());
    s = s.substr(1, s.size() - 2);
  }
  Placements out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || std::isspace(static_cast<unsigned char>(s[i]))) {
      ++i;
      continue;
    }
    std::size_t e = i;
    while (e < s.size() && std::isalpha(static_cast<unsigned char>(s[e]))) ++e;
    if (e == i) fail("bad placement list '", text, "': unexpected '", s[i], "': use R, P or S(d) per mesh dim, e.g. S(0),R");
    const std::string name = s.substr(i, e - i);
    std::optional<std::string> arg;
    if (e < s.size() && s[e] == '(') {
      const auto close = s.find(')', e);
      if (close == std::string::npos) fail("bad placement list '", text, "': unclosed ", name, "(");
      arg = s.substr(e + 1, close - e - 1);
      e = close + 1;
    }
    out.push_back(parse_one(name, arg, text));
    i = e;
  }
  if (static_cast<int>(out.size()) != mesh_ndim) {
    fail("placement list '", text, "' has ", out.size(), " entries but the mesh has ", mesh_ndim, " dims");
  }
  return out;
}

Range chunk(std::int64_t n, int k, int i) {
  const std::int64_t cs = (n + k - 1) / k;
  Range r;
  r.begin = std::min<std::int64_t>(cs * i, n);
  r.end = std::min<std::int64_t>(r.begin + cs, n);
  return r;
}

std::vector<Range> local_box(const std::vector<std::int64_t>& shape, const Placements& placements, const Mesh& mesh,
                             int rank) {
  if (static_cast<int>(placements.size()) != mesh.ndim()) {
    fail("placements ", str(placements), " do not match mesh '", mesh.str(), "'");
  }
  std::vector<Range> box;
  for (std::int64_t n : shape) box.push_back({0, n});
  const std::vector<int> c = mesh.coords(rank);
  for (int md = 0; md < mesh.ndim(); ++md) {
    const Placement& p = placements[static_cast<std::size_t>(md)];
    if (!p.is_shard()) continue;
    if (p.dim < 0 || p.dim >= static_cast<int>(shape.size())) {
      fail("placement S(", p.dim, ") on mesh dim '", mesh.dim(md).name, "' is outside a ", shape.size(), "-D tensor");
    }
    Range& r = box[static_cast<std::size_t>(p.dim)];
    const Range sub = chunk(r.size(), mesh.size(md), c[static_cast<std::size_t>(md)]);
    r = {r.begin + sub.begin, r.begin + sub.end};
  }
  return box;
}

std::vector<int> partial_dims(const Placements& p) {
  std::vector<int> out;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (p[i].is_partial()) out.push_back(static_cast<int>(i));
  }
  return out;
}

}  // namespace fp8moe::sim
