#!/usr/bin/env bash
# govulncheck over the main module against the Go vulnerability database in
# golang.org/x/vulndb (the database's own site is not reachable from CI).
# Usage: govulncheck.sh GOVULNCHECK VULNDB_DIR
#
# It fails on a vulnerability that the code calls in a module go.mod
# requires: upgrade that module. A vulnerability the code calls in the
# standard library is fixed only by a newer Go release than the one that
# builds tierpush; it is listed with the release that fixes it, and fails
# the check only with VULN_STDLIB=fail.
set -euo pipefail
bin=$1 db=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$bin" -format json -db "file://$db" ./... > "$out"
called='select(.finding) | .finding | select(.trace[0].function != null)'
modules=$(jq -r "$called | select(.trace[0].module != \"stdlib\") | \"\(.trace[0].module) \(.osv): fixed in \(.fixed_version)\"" "$out" | sort -u)
stdlib=$(jq -r "$called | select(.trace[0].module == \"stdlib\") | \"\(.osv): fixed in Go \(.fixed_version)\"" "$out" | sort -u)
if [ -n "$stdlib" ]; then
  echo "govulncheck: the code calls vulnerable standard library functions of $(go env GOVERSION):"
  echo "$stdlib" | sed 's/^/  /'
fi
if [ -n "$modules" ]; then
  echo "govulncheck: the code calls vulnerable functions of required modules; upgrade them:"
  echo "$modules" | sed 's/^/  /'
  exit 1
fi
if [ -n "$stdlib" ] && [ "${VULN_STDLIB:-}" = fail ]; then
  exit 1
fi
echo "govulncheck: no called vulnerability in a required module"
