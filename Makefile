# Front door. Every target first makes sure the Debian packages loom needs are installed.
#   make          release build in build/
#   make test     debug build with ASan+UBSan in build-test/, then every test through CTest
#   make run      the most complete end-to-end thing loom does (see README)
#   make bench    benchmarks; they print figures and never fail on timing
#   make format   clang-format every C file
BUILD      ?= build
TEST_BUILD ?= build-test
JOBS       ?= $(shell nproc)

.PHONY: all deps build test run bench format clean

all: build

deps:
	@bash scripts/deps.sh

build: deps
	@cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

test: deps
	@cmake -S . -B $(TEST_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Debug -DLOOM_SANITIZE=ON -DLOOM_WERROR=ON >/dev/null
	@cmake --build $(TEST_BUILD) -j $(JOBS)
	@cd $(TEST_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
		ctest --output-on-failure -j $(JOBS)

run: build
	@bash scripts/run.sh $(BUILD)

bench: build
	@for b in bench/*.sh; do echo "== $$b"; bash $$b $(BUILD) || exit 1; done

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(TEST_BUILD)
