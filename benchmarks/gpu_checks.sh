#!/usr/bin/env bash
# The prepared GPU checks in one command, each under its own time limit, for a short lease on a GPU box:
#
#     OUT=results/ bash benchmarks/gpu_checks.sh [PARTS]
#
# PARTS, a comma list run in this order (default: mfu,invariance):
#   mfu         benchmarks/gpu_mfu_variants.py: where the fast path's time goes, cuDNN attention, torch.compile (~7 min)
#   invariance  benchmarks/gpu_extract.py's batch-invariance and bf16/fp32 parts only, with rows sharing a
#               micro-batch (~1 min)
#   extract     benchmarks/gpu_extract.py whole: the MFU table, invariance, significance (~2 min on an H100)
#   bootstrap   benchmarks/gpu_bootstrap_check.py: the engine's group sums on the GPU at 1 M instances (~1 min)
#   permutation benchmarks/gpu_permutation_check.py: the permutation band's sums on the GPU at 1 M instances, the
#               CPU's compiled path at P = 199 beside it (~3 min)
# Logs and JSON reports go to $OUT (made if missing); the last lines of each log are printed. The first run of
# extract and bootstrap (an H100, 2026-11-28) is in benchmarks/results/h100-2026-11-28/.
set -u
cd "$(dirname "$0")/.."
if [ -z "${OUT:-}" ]; then echo "gpu_checks: set OUT to a folder for the reports (OUT=reports bash $0)" >&2; exit 2; fi
mkdir -p "$OUT" || { echo "gpu_checks: cannot make the folder $OUT" >&2; exit 2; }
export PYTHONPATH="src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
python=${PYTHON:-python3}
for part in $(echo "${1:-mfu,invariance}" | tr ',' ' '); do
    case $part in
        mfu) cmd=(timeout 480 "$python" benchmarks/gpu_mfu_variants.py --reps 2 --budget 430 --out "$OUT/mfu.json") ;;
        invariance) cmd=(timeout 180 "$python" benchmarks/gpu_extract.py --skip speed,significance --out "$OUT/invariance.json") ;;
        extract) cmd=(timeout 420 "$python" benchmarks/gpu_extract.py --out "$OUT/gpu_extract.json") ;;
        bootstrap) cmd=(timeout 240 "$python" benchmarks/gpu_bootstrap_check.py --out "$OUT/gpu_bootstrap.json") ;;
        permutation) cmd=(timeout 300 "$python" benchmarks/gpu_permutation_check.py --out "$OUT/gpu_permutation.json") ;;
        *) echo "gpu_checks: no part '$part' (mfu, invariance, extract, bootstrap, permutation)" >&2; exit 2 ;;
    esac
    echo "== $part: ${cmd[*]}"
    "${cmd[@]}" > "$OUT/$part.log" 2>&1
    echo "== $part: exit $?"
    grep -v '^USDT\|^ *$\|^---\|^   \|^ *[]}{]' "$OUT/$part.log" | cut -c1-200 | tail -40
done
