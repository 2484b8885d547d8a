#!/bin/bash
# Clusters of one server kind are untouched by the block search of sim.hetero_block_search
# (simulator/feasibility.py): 23 seeded episodes of the paper, physical and model-parallel
# scenarios and ramp64, with every degree rule and both agents, hashed by their jobs.csv.
# Run it on two checkouts (PYTHONPATH=<checkout> for the older one) and diff the hash files:
#   PYTHONPATH=/tmp/old benchmarks/sim/hetero_blocks_one_kind_regression.sh /tmp/reg/before
#   benchmarks/sim/hetero_blocks_one_kind_regression.sh /tmp/reg/after
#   diff /tmp/reg/before/hashes.txt /tmp/reg/after/hashes.txt
# The hashes of commit cfc3f8b (equal to those of 1ad4bab, before the block search):
# benchmarks/results/sim/results_hetero_blocks_one_kind.sha256.
set -u
out=${1:?usage: $0 OUT_DIR}
mkdir -p "$out"
BIN="$(cd "$(dirname "$0")/../.." && pwd)/.venv/bin/pacml"
run() {
  name=$1; shift
  nice -n 10 "$BIN" sim progress=false skip_finished=false out_dir="$out/$name" "$@" >"$out/$name.log" 2>&1 || echo "FAIL $name"
}
for s in 0 1; do
  run paper_A_para_max_s$s scenario=paper beta=A policy=para_max seed=$s
  run paper_C_min_feasible_s$s scenario=paper beta=C policy=min_feasible seed=$s
  run paper_D_min_feasible_4_s$s scenario=paper beta=D policy=min_feasible_4 seed=$s
  run paper_B_mf_bs64_s$s scenario=paper beta=B policy=min_feasible policy.block_search=64 seed=$s
  run paper_C_pacml_s$s scenario=paper beta=C policy=pacml seed=$s
  run paper_A_pacml_beta_s$s scenario=paper beta=A policy=pacml_beta seed=$s
  run physical_B_para_max_s$s scenario=physical beta=B policy=para_max seed=$s
  run physical_D_min_feasible_s$s scenario=physical beta=D policy=min_feasible seed=$s
  run physical_C_pacml_s$s scenario=physical beta=C policy=pacml seed=$s
  run mp_fixed_min_feasible_s$s scenario=model_parallel beta=fixed beta.value=1.0 policy=min_feasible seed=$s
done
run paper_A_lookahead_s0 scenario=paper beta=A policy=lookahead seed=0 horizon_s=2.0e5
run paper_B_para_min_s0 scenario=paper beta=B policy=para_min seed=0
run ramp64_C_pacml_s0 scenario=paper cluster=ramp64 beta=C policy=pacml seed=0
(cd "$out" && sha256sum */jobs.csv > hashes.txt)
echo "hashes: $out/hashes.txt"
