#!/bin/bash
# Merges the array tasks' caches and combines their partial files into the run's reports
# and release decision (exit status 0 or 1): see slurm-array.sh.
#SBATCH --job-name=socialbias-combine
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --output=logs/socialbias-combine.out
set -euo pipefail
rm -rf caches/merged && python -m pytest_socialbias cache merge caches/cache-* -o caches/merged
python -m pytest_socialbias combine parts/shard-*.json --report=reports/socialbias.json --html=reports/socialbias.html --junit=reports/gates.xml --baseline="${BASELINE:-none}"
