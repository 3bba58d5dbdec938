# The two entry points: `make demo` (the farm on this machine, embedded default) and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
EXTRAS ?= dev,cuda,hip,postgres

.PHONY: demo test venv system-deps

$(BIN)/farm: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[$(EXTRAS)]'
	touch $@

venv: $(BIN)/farm

system-deps:
	bash scripts/system_deps.sh

demo: venv
	bash scripts/demo.sh

test: venv system-deps
	$(BIN)/python -m pytest -q -ra
