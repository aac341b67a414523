#!/bin/sh
# Builds the tests in a temporary folder and runs them.
set -e
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cc -Wall -Werror -o "$out/test_calc" calc.c test_calc.c
"$out/test_calc"
