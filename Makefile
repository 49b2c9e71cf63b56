# Front door. Every target first makes sure the Debian packages loom needs are installed.
#   make          release build in build/
#   make test     debug build with ASan+UBSan in build-test/, then every test through CTest
#   make run      the most complete end-to-end thing loom does (see README)
#   make install  release build installed under PREFIX (/usr/local), staged under DESTDIR if set:
#                 programs, libloom{client,sync,state}.so, headers, .pc, man pages, systemd units
#   make bench    benchmarks; they print figures and never fail on timing
#   make fuzz     libFuzzer campaigns (clang), FUZZ_TIME seconds per target (FUZZ_RUNS: a cap)
#   make format   clang-format every C file
#   make gpu-bundle  programs, libraries, Python package and GPU tests in one folder (GPU_BUNDLE)
#   make test-gpu    GPU tests and benchmarks from a bundle: make test-gpu BUNDLE=dir (docs/gpu.md)
BUILD      ?= build
TEST_BUILD ?= build-test
FUZZ_BUILD ?= build-fuzz
FUZZ_TIME  ?= 60
FUZZ_RUNS  ?= 0
JOBS       ?= $(shell nproc)
PREFIX     ?= /usr/local
GPU_BUNDLE ?= gpu-bundle

.PHONY: all deps build test install run bench fuzz format clean gpu-bundle test-gpu

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

# cmake --install reads DESTDIR from the environment.
install: build
	@DESTDIR="$(DESTDIR)" cmake --install $(BUILD) --prefix $(PREFIX)

run: build
	@bash scripts/run.sh $(BUILD)

bench: build
	@for b in bench/*.sh; do echo "== $$b"; bash $$b $(BUILD) || exit 1; done

fuzz: deps
	@cmake -S . -B $(FUZZ_BUILD) -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
		-DLOOM_FUZZ=ON >/dev/null
	@cmake --build $(FUZZ_BUILD) -j $(JOBS) --target $$(cd tests/fuzz && ls fuzz_*.c | sed 's/\.c$$//')
	@bash scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_TIME) $(FUZZ_RUNS)

gpu-bundle: build
	@bash scripts/gpu-bundle.sh $(BUILD) $(GPU_BUNDLE)

# From a bundle made elsewhere (BUNDLE=dir), or, without BUNDLE, one made here from the build.
test-gpu:
	@if [ -n "$(BUNDLE)" ]; then bash tests/gpu/run.sh $(BUNDLE); \
	else $(MAKE) --no-print-directory gpu-bundle && bash tests/gpu/run.sh $(GPU_BUNDLE); fi

format:
	@clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) $(TEST_BUILD) $(FUZZ_BUILD)
