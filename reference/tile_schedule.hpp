#pragma once
// Internal to reference/: the macro-tile schedule shared by the CPU fast paths (block_gemm.cpp's
// exact/promote-fp32 path and block_gemm_tc.cpp's hopper-tc path). Every task (an expert's GEMM)
// is cut into mc-row x nc_tile-column macro-tiles, numbered in one flat range so that one dynamic
// OpenMP loop shares all tasks' tiles: small experts keep every thread busy and no expert waits at
// its own barrier. nc_tile halves (down to 2 micro-panels of nr columns) while there are fewer
// than two tiles per thread.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "reference/gemm.hpp"

namespace fp8moe {

struct TileSchedule {
  std::int64_t mc = 0, nc_tile = 0;
  std::vector<std::int64_t> first_tile;  // (tasks + 1): task t's tiles are [first_tile[t], first_tile[t+1])
  std::vector<std::int64_t> col_tiles;   // (tasks): column tiles of task t

  std::int64_t tiles() const { return first_tile.back(); }
  // The task of flat tile `tile`, and the tile's first row and column within that task.
  std::size_t task_of(std::int64_t tile) const {
    return static_cast<std::size_t>(std::upper_bound(first_tile.begin(), first_tile.end(), tile) - first_tile.begin() - 1);
  }
  std::int64_t row0(std::size_t t, std::int64_t tile) const { return (tile - first_tile[t]) / col_tiles[t] * mc; }
  std::int64_t col0(std::size_t t, std::int64_t tile) const { return (tile - first_tile[t]) % col_tiles[t] * nc_tile; }
};

inline TileSchedule plan_tiles(std::span<const GemmTask> tasks, std::int64_t mc, std::int64_t nc_max, int nr) {
  auto count = [&](std::int64_t nc) {
    std::int64_t c = 0;
    for (const GemmTask& g : tasks) c += ((g.L.rows + mc - 1) / mc) * ((g.R.rows + nc - 1) / nc);
    return c;
  };
  TileSchedule s;
  s.mc = mc;
  s.nc_tile = nc_max;
  while (s.nc_tile > 2 * nr && count(s.nc_tile) < 2 * omp_get_max_threads()) s.nc_tile /= 2;
  const std::size_t n = tasks.size();
  s.first_tile.assign(n + 1, 0);
  s.col_tiles.assign(n, 0);
  for (std::size_t t = 0; t < n; ++t) {
    s.col_tiles[t] = (tasks[t].R.rows + s.nc_tile - 1) / s.nc_tile;
    s.first_tile[t + 1] = s.first_tile[t] + ((tasks[t].L.rows + mc - 1) / mc) * s.col_tiles[t];
  }
  return s;
}

}  // namespace fp8moe
