#include "sim/sweep/save.hpp"

#include <hdf5.h>
#include <hdf5_hl.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "reference/checked.hpp"
#include "reference/error.hpp"
#include "reference/metrics.hpp"

namespace fp8moe::sim {

namespace {

// SQNR of x against ref over the given elements; +inf when equal (also when both are all zero),
// -inf when ref is all zero but x is not.
double sqnr_of(const std::vector<double>& ref, const std::vector<double>& x) {
  double sig = 0, err = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    sig += ref[i] * ref[i];
    err += (ref[i] - x[i]) * (ref[i] - x[i]);
  }
  if (std::isnan(sig) || std::isnan(err)) return std::numeric_limits<double>::quiet_NaN();
  if (err == 0) return std::numeric_limits<double>::infinity();
  if (sig == 0) return -std::numeric_limits<double>::infinity();
  return 10 * std::log10(sig / err);
}

// A 1-D int64 dimension scale: the first element index of each tile/block.
h5::Dataset make_scale(h5::Group& g, const std::string& name, std::int64_t n, std::int64_t step) {
  Tensor<std::int64_t> v({n});
  for (std::int64_t i = 0; i < n; ++i) v.data[static_cast<std::size_t>(i)] = i * step;
  h5::Dataset d = g.write(name, v);
  if (H5DSset_scale(d.id(), name.c_str()) < 0) fail("cannot make '", name, "' a dimension scale in '", g.file(), "'");
  return d;
}

void attach(h5::Group& g, const h5::Dataset& data, const std::vector<std::string>& scales) {
  for (std::size_t i = 0; i < scales.size(); ++i) {
    const h5::Dataset s = g.open_dataset(scales[i]);
    if (H5DSattach_scale(data.id(), s.id(), static_cast<unsigned>(i)) < 0) {
      fail("cannot attach dimension scale '", scales[i], "' in '", g.file(), "'");
    }
  }
}

// The (E, rows, cols) view of a 2-D or 3-D tensor.
struct View3 {
  std::int64_t E, R, C;
};
View3 view3(const std::vector<std::int64_t>& s) {
  if (s.size() == 2) return {1, s[0], s[1]};
  if (s.size() == 3) return {s[0], s[1], s[2]};
  fail("save_blocks: a tensor of rank ", s.size(), " has no tiles");
}


// Per (e, tile row, tile col): f over the tile's elements (flat indices into the tensor).
template <class F>
TensorD per_tile(const View3& v, std::int64_t br, std::int64_t bc, bool three_d, F&& f) {
  const std::int64_t tr = ceil_div(v.R, br), tc = ceil_div(v.C, bc);
  TensorD out(three_d ? std::vector<std::int64_t>{v.E, tr, tc} : std::vector<std::int64_t>{tr, tc});
  std::vector<std::int64_t> idx;
  for (std::int64_t e = 0; e < v.E; ++e) {
    for (std::int64_t i = 0; i < tr; ++i) {
      for (std::int64_t j = 0; j < tc; ++j) {
        idx.clear();
        for (std::int64_t r = i * br; r < std::min(v.R, (i + 1) * br); ++r) {
          for (std::int64_t c = j * bc; c < std::min(v.C, (j + 1) * bc); ++c) idx.push_back((e * v.R + r) * v.C + c);
        }
        out.data[static_cast<std::size_t>((e * tr + i) * tc + j)] = f(e, i, j, idx);
      }
    }
  }
  return out;
}

// A map with its dimension scales rs (rows), cs (cols) and, for 3-D maps, `expert`.
void write_map(h5::Group& g, const std::string& name, const TensorD& map, const std::string& rs, const std::string& cs,
               bool three_d, std::int64_t row_step, std::int64_t col_step) {
  const std::int64_t tr = map.dim(three_d ? 1 : 0), tc = map.dim(three_d ? 2 : 1);
  if (!g.is_dataset(rs)) make_scale(g, rs, tr, row_step);
  if (!g.is_dataset(cs)) make_scale(g, cs, tc, col_step);
  if (three_d && !g.is_dataset("expert")) make_scale(g, "expert", map.dim(0), 1);
  const h5::Dataset d = g.write(name, map);
  attach(g, d, three_d ? std::vector<std::string>{"expert", rs, cs} : std::vector<std::string>{rs, cs});
}

}  // namespace

void save_blocks(h5::Group g, const scenarios::Case& c, const CaseTensors& t) {
  g.set_attr("case_id", static_cast<std::int64_t>(c.id));
  g.set_attr("case_key", c.key());
  const std::int64_t B = t.block;
  g.set_attr("block", B);
  for (const CaseTensors::Output& o : t.outputs) {
    const View3 v = view3(o.result.shape);
    const bool three = o.result.rank() == 3;
    if (v.R == 0 || v.C == 0 || v.E == 0) continue;
    std::vector<double> a, b;
    auto tile_sqnr = [&](const TensorF& ref) {
      return per_tile(v, B, B, three, [&](std::int64_t, std::int64_t, std::int64_t, const std::vector<std::int64_t>& idx) {
        a.clear();
        b.clear();
        for (auto k : idx) {
          a.push_back(ref.data[static_cast<std::size_t>(k)]);
          b.push_back(o.result.data[static_cast<std::size_t>(k)]);
        }
        return sqnr_of(a, b);
      });
    };
    const std::string rs = o.name + "_tile_row", cs = o.name + "_tile_col";
    write_map(g, o.name + "_tile_sqnr", tile_sqnr(o.hp64), rs, cs, three, B, B);
    write_map(g, o.name + "_tile_sqnr_single", tile_sqnr(o.single), rs, cs, three, B, B);
  }
  for (const CaseTensors::Operand& op : t.quantized) {
    if (op.x.shape != op.q.codes.shape || op.x.numel() == 0) continue;
    const View3 v = view3(op.x.shape);
    const bool three = op.x.rank() == 3;
    const std::int64_t br = op.q.layout.block_rows, bc = op.q.layout.block_cols;
    const TensorF deq = dequantize(op.q);
    TensorD amax = per_tile(v, br, bc, three, [&](std::int64_t, std::int64_t, std::int64_t, const std::vector<std::int64_t>& idx) {
      double m = 0;
      for (auto k : idx) m = std::max(m, std::fabs(static_cast<double>(op.x.data[static_cast<std::size_t>(k)])));
      return m;
    });
    TensorD scale = per_tile(v, br, bc, three, [&](std::int64_t e, std::int64_t i, std::int64_t j, const std::vector<std::int64_t>&) {
      return static_cast<double>(op.q.scale_at(e, i * br, j * bc));
    });
    std::vector<double> a, b;
    TensorD bs = per_tile(v, br, bc, three, [&](std::int64_t, std::int64_t, std::int64_t, const std::vector<std::int64_t>& idx) {
      a.clear();
      b.clear();
      for (auto k : idx) {
        a.push_back(op.x.data[static_cast<std::size_t>(k)]);
        b.push_back(deq.data[static_cast<std::size_t>(k)]);
      }
      return sqnr_of(a, b);
    });
    // 1 where every input of the block is zero (token-group padding, zero rows): the cases table
    // leaves those out of its scale statistics (lhs_/rhs_empty_blocks counts them).
    TensorD empty = per_tile(v, br, bc, three, [&](std::int64_t, std::int64_t, std::int64_t, const std::vector<std::int64_t>& idx) {
      for (auto k : idx) {
        if (op.x.data[static_cast<std::size_t>(k)] != 0.0f) return 0.0;
      }
      return 1.0;
    });
    const std::string rs = op.name + "_brow", cs = op.name + "_bcol";
    write_map(g, op.name + "_empty", empty, rs, cs, three, br, bc);
    write_map(g, op.name + "_amax", amax, rs, cs, three, br, bc);
    write_map(g, op.name + "_scale", scale, rs, cs, three, br, bc);
    write_map(g, op.name + "_block_sqnr", bs, rs, cs, three, br, bc);
    g.open_dataset(op.name + "_amax").set_attr("recipe", recipe_name(op.q.recipe));
  }
}

void save_tensors(h5::Group g, const scenarios::Case& c, const CaseTensors& t) {
  g.set_attr("case_id", static_cast<std::int64_t>(c.id));
  g.set_attr("case_key", c.key());
  for (const CaseTensors::Output& o : t.outputs) {
    g.write(o.name, o.result);
    g.write(o.name + "_single", o.single);
    g.write(o.name + "_hp64", o.hp64);
  }
  for (const auto& [name, x] : t.inputs) g.write(name, x);
  Tensor<std::int32_t> offs({static_cast<std::int64_t>(t.offs.size())});
  offs.data = t.offs;
  g.write("offs", offs);
}

std::int64_t saved_bytes_bound(const CaseTensors& t, bool blocks, bool tensors) {
  constexpr std::int64_t kPerDataset = 4096;  // object header, attributes, dimension-scale references
  std::int64_t bytes = 0;
  auto map_bytes = [&](const std::vector<std::int64_t>& shape, std::int64_t br, std::int64_t bc) {
    if (shape.size() != 2 && shape.size() != 3) return std::int64_t{0};
    const View3 v = view3(shape);
    // The map, float64 per tile, and its two scales (int64 per tile row and column).
    return v.E * ceil_div(v.R, br) * ceil_div(v.C, bc) * 8 + (ceil_div(v.R, br) + ceil_div(v.C, bc) + v.E) * 8 +
           3 * kPerDataset;
  };
  if (blocks) {
    for (const CaseTensors::Output& o : t.outputs) bytes += 2 * map_bytes(o.result.shape, t.block, t.block);
    for (const CaseTensors::Operand& op : t.quantized) {
      bytes += 3 * map_bytes(op.x.shape, std::max<std::int64_t>(op.q.layout.block_rows, 1), std::max<std::int64_t>(op.q.layout.block_cols, 1));
    }
  }
  if (tensors) {
    for (const CaseTensors::Output& o : t.outputs) {
      bytes += 4 * static_cast<std::int64_t>(o.result.numel() + o.single.numel() + o.hp64.numel()) + 3 * kPerDataset;
    }
    for (const auto& [name, x] : t.inputs) bytes += 4 * static_cast<std::int64_t>(x.numel()) + kPerDataset;
    bytes += 4 * static_cast<std::int64_t>(t.offs.size()) + kPerDataset;
  }
  return bytes;
}

}  // namespace fp8moe::sim
