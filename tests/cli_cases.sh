# Sourced by the shell tests of programs (tool_errors.sh, mnist_errors.sh): cases that run a
# command and check its exit status and output. The sourcing script sets `program` (the name
# its messages start with: "PROGRAM: error: ...") and ends with `report`.
failures=0
cases=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# check STATUS "description" "pattern" command...: the command exits with STATUS and its
# output matches pattern; an error (status 1) is one message, without a crash or CLI11's
# boilerplate. A message must not suggest a flag the user did not give: set `forbid` to a
# pattern the output must not hold (it applies to the next case only).
forbid=""
check() {
  local expected="$1" what="$2" pattern="$3"
  shift 3
  local out status
  cases=$((cases + 1))
  out=$("$@" 2>&1)
  status=$?
  if [ "$status" -ne "$expected" ]; then
    echo "FAIL: $what: exit status $status, expected $expected"; echo "$out"; failures=$((failures + 1))
  elif ! echo "$out" | grep -q -- "$pattern"; then
    echo "FAIL: $what: output lacks '$pattern'"; echo "$out"; failures=$((failures + 1))
  elif echo "$out" | grep -q -e "Check failed" -e "Aborted" -e "terminate called" -e "\*\*\*"; then
    echo "FAIL: $what: crashed instead of reporting"; echo "$out"; failures=$((failures + 1))
  elif [ "$expected" -eq 1 ] && { [ "$(echo "$out" | grep -c -- "error")" -ne 1 ] ||
                                  echo "$out" | grep -q "Run with --help"; }; then
    echo "FAIL: $what: not one message"; echo "$out"; failures=$((failures + 1))
  elif [ -n "$forbid" ] && echo "$out" | grep -q -- "$forbid"; then
    echo "FAIL: $what: output suggests '$forbid'"; echo "$out"; failures=$((failures + 1))
  else
    echo "ok: $what: $(echo "$out" | grep -- "$program: error" | head -1)"
  fi
  forbid=""
}
# idx FILE MAGIC_BYTE COUNT_BYTE [image bytes]: an IDX file of zeros, COUNT_BYTE (octal)
# labels (magic 001), or images of 28 x 28 (magic 003, 784 bytes each).
idx() {
  local file="$1" magic="$2" count="$3" bytes="${4:-}"
  if [ -n "$bytes" ]; then
    printf "\\000\\000\\010\\$magic\\000\\000\\000\\$count\\000\\000\\000\\034\\000\\000\\000\\034" > "$file"
  else
    printf "\\000\\000\\010\\$magic\\000\\000\\000\\$count" > "$file"
  fi
  head -c "$((${bytes:-1} * $((8#$count))))" /dev/zero >> "$file"
}
# tiny_mnist DIR: IDX files of zeros with the names the models' prototxt files use, in DIR
# (made): 200 training images, 100 test images of 28 x 28, and their labels.
tiny_mnist() {
  mkdir -p "$1"
  idx "$1/train-images-idx3-ubyte" 003 310 784   # 0310 = 200
  idx "$1/train-labels-idx1-ubyte" 001 310
  idx "$1/t10k-images-idx3-ubyte" 003 144 784    # 0144 = 100
  idx "$1/t10k-labels-idx1-ubyte" 001 144
}

expect_error() { check 1 "$@"; }    # expect_error "description" "pattern" command...
expect_success() { check 0 "$@"; }  # expect_success "description" "pattern" command...

# The summary line and the script's exit status.
report() {
  echo "$((cases - failures)) passed, $failures failed"
  [ "$failures" -eq 0 ]
}
