#!/usr/bin/env bash
# timed.sh NAME COMMAND [ARG...]: runs the command and prints how long NAME
# took, keeping the command's exit status. The make targets of the test gate
# print their durations with it.
name=$1
shift
start=$(date +%s)
"$@"
rc=$?
t=$(($(date +%s) - start))
echo "$name: $((t / 60))m$((t % 60))s"
exit $rc
