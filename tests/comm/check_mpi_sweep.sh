#!/usr/bin/env bash
# The real-mesh sweep (issue 7 item 2): scenarios/ci.ini with one process per rank over MPI
# equals the fake-mesh sweep of the same binary, row for row (every metric bitwise; the
# reduction orders are the fake's).
#   check_mpi_sweep.sh MPIEXEC FLAGS(comma separated) FP8MOE SCENARIO WORK
set -euo pipefail
mpiexec=$1
IFS=, read -r -a flags <<<"$2"
fp8moe=$3
scenario=$4
work=$5
mkdir -p "$work"
"$fp8moe" sweep "$scenario" --out "$work/fake.h5" --force -q >"$work/fake.txt"
"$mpiexec" -np 4 "${flags[@]}" "$fp8moe" sweep "$scenario" --runtime mpi --out "$work/mpi.h5" --force -q >"$work/mpi.txt"
tail -1 "$work/mpi.txt"
"$fp8moe" compare "$work/fake.h5" "$work/mpi.h5" --identical | tail -2
# Both tables print the same rows.
diff <(grep -v '^#' "$work/fake.txt") <(grep -v '^#' "$work/mpi.txt")
/usr/bin/env python3 - "$work/mpi.h5" <<'PY' || exit 1
import sys
try:
    import h5py
except ImportError:
    sys.exit(0)
a = h5py.File(sys.argv[1], "r").attrs
assert a["mesh_runtime"] == "mpi" and a["launch_world"] == "4", dict(a)
assert "rank_hosts" in a and "mpi_version" in a, dict(a)
PY
echo "mpi sweep equals the fake sweep"
