#!/usr/bin/env bash
# Policy CI gate for the Rego library in this directory.
#
# Usage: policies/check.sh [path/to/opa]     (or set OPA_BIN; falls back to `opa` on PATH)
#        MIN_COVERAGE=90 by default.
#
# Runs, and fails if any of them fails:
#   1. opa test              every test passes (-v, a line per test, with VERBOSE=1)
#   2. opa test --coverage   overall coverage >= MIN_COVERAGE (printed)
#   3. opa fmt --list        prints nothing (all files formatted)
#   4. opa check --strict    clean
#   5. no module (other than *_test.rego) imports a whole package of this library
#      (see README.md, "Keeping evaluation cheap"); import the rules themselves instead.
#   6. the committed bundle (../bundles/policies.tar.gz, what the embedded engine serves)
#      is exactly what scripts/build-bundle makes of these sources with this opa.
#   7. regal lint            no finding (Regal, pinned and built by ../scripts/provision-regal
#      unless REGAL_BIN names it; configured by ../.regal/config.yaml, which records each
#      deliberate exception and why). A Regal that cannot be provisioned fails the check.
#
# OPA_TEST_TIMEOUT (default 60s) bounds each test: opa's own 5 s default fails the heavier
# tests on a loaded machine.
set -euo pipefail

opa="${1:-${OPA_BIN:-}}"
if [[ -z "${opa}" ]]; then
	opa="$(command -v opa || true)"
fi
if [[ -z "${opa}" || ! -x "${opa}" ]]; then
	echo "check.sh: no executable opa binary (pass its path as \$1 or set OPA_BIN)" >&2
	exit 2
fi

min_coverage="${MIN_COVERAGE:-90}"
test_timeout="${OPA_TEST_TIMEOUT:-60s}"
policy_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
failed=0

echo "== opa version"
# Read all of it: `| head -n 1` would close the pipe early and, under pipefail, fail the
# script with SIGPIPE whenever opa writes its second line a moment too late.
version="$("${opa}" version)"
echo "${version%%$'\n'*}"

# A line per test only with VERBOSE=1; otherwise opa prints the failures and a summary.
verbose=()
if [[ -n "${VERBOSE:-}" ]]; then
	verbose=(-v)
fi
echo "== opa test ${policy_dir}"
if ! "${opa}" test "${policy_dir}" "${verbose[@]}" --timeout "${test_timeout}"; then
	echo "FAIL: opa test" >&2
	failed=1
fi

echo "== opa test --coverage"
report="$(mktemp)"
rebuilt="$(mktemp)"
trap 'rm -f "${report}" "${rebuilt}"' EXIT
if "${opa}" test "${policy_dir}" --coverage --format=json --timeout "${test_timeout}" >"${report}"; then
	coverage="$("${opa}" eval --stdin-input --format=raw 'input.coverage' <"${report}")"
	echo "coverage: ${coverage}% (minimum ${min_coverage}%)"
	if ! awk -v c="${coverage}" -v m="${min_coverage}" 'BEGIN { exit !(c + 0 >= m + 0) }'; then
		echo "FAIL: coverage ${coverage}% is below ${min_coverage}%" >&2
		failed=1
	fi
else
	echo "FAIL: opa test --coverage" >&2
	failed=1
fi

echo "== opa fmt --list"
unformatted="$("${opa}" fmt --list "${policy_dir}")" || failed=1
if [[ -n "${unformatted}" ]]; then
	echo "${unformatted}"
	echo "FAIL: files need 'opa fmt -w'" >&2
	failed=1
fi

echo "== opa check --strict"
if ! "${opa}" check --strict "${policy_dir}"; then
	echo "FAIL: opa check --strict" >&2
	failed=1
fi

echo "== package imports"
package_imports="$(find "${policy_dir}" -name '*.rego' ! -name '*_test.rego' -print0 |
	xargs -0 grep -nE '^import data\.gateway\.authz\.[A-Za-z0-9_]+( as [A-Za-z0-9_]+)?[[:space:]]*$' || true)"
if [[ -n "${package_imports}" ]]; then
	echo "${package_imports}"
	echo "FAIL: import the rules of these packages, not the packages" >&2
	failed=1
fi

echo "== committed bundle"
committed="${policy_dir}/../bundles/policies.tar.gz"
if ! "${policy_dir}/../scripts/build-bundle" "${opa}" "${rebuilt}"; then
	echo "FAIL: the bundle does not build" >&2
	failed=1
elif ! cmp -s "${rebuilt}" "${committed}"; then
	echo "FAIL: bundles/policies.tar.gz differs from the policies: run make bundle" >&2
	failed=1
else
	echo "bundles/policies.tar.gz matches the policies"
fi

echo "== regal lint"
if ! regal="$("${policy_dir}/../scripts/provision-regal")"; then
	echo "FAIL: no regal (scripts/provision-regal could not provision it)" >&2
	failed=1
elif ! (cd "${policy_dir}/.." && "${regal}" lint --config-file .regal/config.yaml policies); then
	echo "FAIL: regal lint" >&2
	failed=1
fi

if [[ "${failed}" -ne 0 ]]; then
	echo "policy checks FAILED" >&2
	exit 1
fi
echo "policy checks passed"
