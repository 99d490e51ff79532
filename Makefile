# fabricflow: the two commands a newcomer needs are `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: venv system-deps test demo bench fuzz docs clean stack-up stack-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	# compile the numba sFlow walk and batch walk into their caches now, not when a service first starts (20-40 s once)
	$(BIN)/python -c "from ingest.decode.sflow_batch import warm_up; warm_up()"
	$(BIN)/python -c "from schemas.codec import warm_up; warm_up()"
	touch $(STAMP)

## venv: create .venv and install fabricflow with its test tools
venv: $(STAMP)

## system-deps: Debian packages the interop tests use (softflowd, pmacct, tshark, nfdump, tcpdump)
system-deps:
	bash scripts/install-system-deps.sh

## test: install everything, start the embedded broker + object store, run the whole suite, stop them
test: venv system-deps
	bash scripts/run-tests.sh

## demo: install everything and run the main job on the embedded default
demo: venv
	$(BIN)/fabricflow demo

## bench: run the benchmarks (prints records/s and ratios; not part of the tests)
bench: venv
	for b in bench/*.py; do echo "== $$b"; $(BIN)/python $$b || exit 1; done

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
	rm -rf $(VENV) .fabricflow var .pytest_cache
