#!/usr/bin/env bash
# Runs every fuzz target (func FuzzXxx) of the library and command modules
# for FUZZTIME each, one after another, and prints a summary: target,
# executions, new corpus entries, result. A failing input is left in the
# package's testdata/fuzz/ (commit it: make test then replays it) and the
# script exits 1. Usage: tools/fuzz/run.sh [FUZZTIME] [REGEXP]
set -uo pipefail
fuzztime=${1:-2m}
only=${2:-.}
root=$(cd "$(dirname "$0")/../.." && pwd)
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
failed=0
printf '%-52s %12s %8s  %s\n' TARGET EXECS NEW RESULT
for mod in . cmd/leasecron; do
	cd "$root/$mod" || exit 1
	while IFS=: read -r file name; do
		dir=./$(dirname "${file#./}")
		target="${dir#./}.$name"
		[[ $mod == . ]] || target="$mod/$target"
		[[ $target =~ $only ]] || continue
		out="$log/$name.log"
		go test -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$dir" >"$out" 2>&1
		rc=$?
		last=$(grep -E '^fuzz: elapsed' "$out" | tail -1)
		execs=$(sed -nE 's/.*execs: ([0-9]+).*/\1/p' <<<"$last")
		new=$(sed -nE 's/.*new interesting: ([0-9]+).*/\1/p' <<<"$last")
		if [[ $rc -eq 0 ]]; then
			printf '%-52s %12s %8s  %s\n' "$target" "${execs:-?}" "${new:-?}" ok
		else
			failed=1
			printf '%-52s %12s %8s  %s\n' "$target" "${execs:-?}" "${new:-?}" FAILED
			grep -vE '^fuzz: elapsed' "$out" | head -30 | sed 's/^/    /'
		fi
	done < <(grep -rHoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' --exclude-dir=cmd --exclude-dir=tools --exclude-dir=examples --exclude-dir=node_modules . | sed 's/func //' | sort)
done
exit $failed
