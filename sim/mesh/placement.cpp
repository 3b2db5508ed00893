#include "sim/mesh/placement.hpp"

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

std::string str(const Placements& p) {
  std::string s = "[";
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (i) s += ',';
    s += p[i].str();
  }
  return s + "]";
}

Placements parse_placements(const std::string& text, int mesh_ndim) {
  std::string s = text;
  if (!s.empty() && s.front() == '[') s = s.substr(1);
  if (!s.empty() && s.back() == ']') s.pop_back();
  Placements out;
  std::size_t i = 0;
  while (i < s.size()) {
    if (s[i] == ',' || s[i] == ' ') {
      ++i;
      continue;
    }
    if (s[i] == 'R') {
      out.push_back(Placement::R());
      ++i;
    } else if (s[i] == 'P') {
      out.push_back(Placement::P());
      ++i;
    } else if (s[i] == 'S' && i + 3 < s.size() + 1 && s[i + 1] == '(') {
      const auto close = s.find(')', i);
      if (close == std::string::npos) fail("bad placement list '", text, "': unclosed S(");
      try {
        out.push_back(Placement::S(std::stoi(s.substr(i + 2, close - i - 2))));
      } catch (const std::exception&) {
        fail("bad placement list '", text, "': S(d) needs an integer tensor dim");
      }
      i = close + 1;
    } else {
      fail("bad placement list '", text, "': use R, P or S(d) per mesh dim, e.g. S(0),R");
    }
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
