# fabricflow: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv wheelhouse system-deps test demo bench fuzz docs clean stack-up stack-down

# the compiled decoders (Cython sources; built into extension modules beside them by the install below)
COMPILED := ingest/decode/_sflow_packet.pyx ingest/decode/_sflow_compiled.pyx schemas/_batch_compiled.pyx

$(STAMP): pyproject.toml setup.py $(COMPILED) $(wildcard ingest/decode/*.pxd)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	# also compiles the decoders (Cython -> C -> .so): needs a C compiler and the Python headers
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

# wheels of every dependency and build requirement, downloaded while installing (never at run time), so
# tests/e2e/test_installed.py installs the built wheel into a fresh prefix offline
WHEELHOUSE := $(VENV)/wheelhouse/.complete
$(WHEELHOUSE): $(STAMP)
	$(BIN)/python scripts/wheelhouse.py --dest $(VENV)/wheelhouse
	touch $(WHEELHOUSE)

## wheelhouse: the wheels tests/e2e/test_installed.py installs from (make test fetches them)
wheelhouse: $(WHEELHOUSE)

## venv: create .venv and install fabricflow with its test tools
venv: $(STAMP)

## system-deps: Debian packages the interop tests use (softflowd, pmacct, tshark, nfdump, tcpdump)
system-deps:
	bash scripts/install-system-deps.sh

## test: install everything, start the embedded broker + object store, run the whole suite, stop them
test: venv wheelhouse system-deps
	bash scripts/run-tests.sh

## demo: install everything and run the main job on the embedded default (DEMO_ARGS="--no-ui": plain lines)
demo: venv
	$(BIN)/fabricflow demo $(DEMO_ARGS)

## bench: run the benchmarks (prints records/s and ratios; not part of the tests)
bench: venv
	for b in bench/*.py; do grep -q __main__ $$b || continue; m=$$(basename $$b .py); echo "== bench.$$m"; $(BIN)/python -m bench.$$m || exit 1; done

## fuzz: coverage-guided fuzzing of every decoder, FUZZ_CPU_S CPU-seconds per target (docs/fuzzing.md)
FUZZ_CPU_S ?= 600
fuzz: venv
	for t in sflow netflow5 netflow9 ipfix pipeline codec; do nice -n 19 $(BIN)/python -m tests.fuzz.run $$t -max_cpu_time=$(FUZZ_CPU_S) || exit 1; done

## docs: regenerate docs that are derived from code
docs: venv
	$(BIN)/fabricflow config docs -o docs/configuration.md

stack-up: venv
	$(BIN)/fabricflow stack up

stack-down: venv
	$(BIN)/fabricflow stack down

clean:
	rm -rf $(VENV) .fabricflow var .pytest_cache build
	rm -f $(COMPILED:.pyx=.c) $(COMPILED:.pyx=.*.so)
