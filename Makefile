# The two entry points of the README. Both install what is missing, build and fetch MNIST.
.PHONY: demo test build data

build:
	scripts/setup.sh

data:
	scripts/fetch_mnist.sh

demo: build data
	scripts/demo.sh

test: build data
	cd build && ctest --output-on-failure -j2
