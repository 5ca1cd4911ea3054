# The two entry points of the README. Both install what is missing, build and fetch MNIST.
# `make test` also installs clang and libFuzzer for its sanitizer and fuzzing stages
# (scripts/test.sh, docs/testing.md).
.PHONY: demo test build build-for-test data

build:
	scripts/setup.sh

build-for-test:
	LAMINA_TEST_TOOLS=1 scripts/setup.sh

data:
	scripts/fetch_mnist.sh

demo: build data
	scripts/demo.sh

test: build-for-test data
	scripts/test.sh
