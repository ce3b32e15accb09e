#!/bin/bash
# A social-bias run split into shards as a Slurm job array (docs/shards.md): three array
# tasks (SLURM_ARRAY_TASK_ID 1..3, read by --socialbias-shard=auto), each writing its
# partial file and its own cache folder; then slurm-combine.sh, once they have all ended:
#
#   jid=$(sbatch --parsable slurm-array.sh) && sbatch --dependency=afterany:$jid slurm-combine.sh
#
# Run from the project folder (suites/, thresholds.yaml) with the plugin installed; TARGET,
# JUDGE and the key come from the environment sbatch passes on (--export=ALL).
#SBATCH --job-name=socialbias-shard
#SBATCH --array=1-3
#SBATCH --cpus-per-task=4
#SBATCH --time=12:00:00
#SBATCH --output=logs/socialbias-shard-%a.out
set -euo pipefail
pytest suites/ --target="$TARGET" --judge="$JUDGE" -n 4 --socialbias-record=new --socialbias-shard=auto --socialbias-partial=parts/shard-$SLURM_ARRAY_TASK_ID.json --socialbias-cache-dir=caches/cache-$SLURM_ARRAY_TASK_ID
