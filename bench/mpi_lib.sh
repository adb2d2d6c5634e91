# mpi_lib.sh - what the bench/mpi_*.sh scripts share (sourced, with `ranks` set): mpirun's root flag, a clock, the
# median of a column of numbers and the parallel efficiency t(1) / (ranks * t(N)) in percent.
root=""
[ "$(id -u)" -eq 0 ] && root="--allow-run-as-root"
now() { date +%s.%N; }
med() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
eff() { awk -v a="$1" -v b="$2" -v n="$ranks" 'BEGIN { print 100 * a / (n * b) }'; }
