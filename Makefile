# Rackplane developer commands. Each one works on a fresh clone: it creates .venv itself.
PYTHON ?= python3
export PYTHON

.PHONY: messages run test test-fast test-stack test-slurm-next coverage docs fuzz lint fmt bench clean venv venv-test

run: ## serve the portal on http://127.0.0.1:8000 with a Celery worker and beat (DEBUG=1, SQLite, filesystem broker, demo data, admin login; Ctrl-C stops all)
	bash scripts/run.sh

test: ## the full check: real PostgreSQL + Redis + Chromium, ruff, migrations, pytest
	bash scripts/test.sh

test-stack: ## the production-stack tests alone (tests/stack; `make test` runs them too): 2 replicas, worker/Redis/PostgreSQL/beat faults, upgrade, backup/restore
	bash scripts/test-stack.sh

test-slurm-next: ## the Slurm tests against a second testbed on the newest Slurm Debian carries (sid: 26.05; `make test` runs 24.11); RACKPLANE_SLURM_SUITE picks another
	bash scripts/test-slurm-next.sh

test-fast: ## the quick check (under 90 s, no services): ruff, import layers, types, migrations, docs, pytest on SQLite without e2e/integration/slow
	bash scripts/test-fast.sh

coverage: ## `make test` measuring line coverage of the product code (prints it; var/coverage.json)
	RACKPLANE_COVERAGE=1 bash scripts/test.sh

docs: venv-test ## the documentation site, built into var/site (open var/site/index.html)
	.venv/bin/mkdocs build --strict

FUZZ_EXAMPLES ?= 50
fuzz: venv-test ## the long schemathesis run (examples, coverage, fuzzing; FUZZ_EXAMPLES per operation; 3 tokens): prints cases and failures
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_PHASES=examples,coverage,fuzzing FUZZ_REPORT=1 LOG_LEVEL=ERROR \
		.venv/bin/pytest -p no:cacheprovider -s tests/test_openapi_fuzz.py

lint: venv-test
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/lint-imports

fmt: venv-test
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

BENCH_ARGS ?= --racks 1000
bench: ## scale benchmark (JSON figures): 1,000 racks, real PostgreSQL + Redis + gunicorn + Celery it starts itself
	@bash benchmarks/bench.sh $(BENCH_ARGS)

venv:
	bash scripts/venv.sh

venv-test:
	bash scripts/venv.sh test

clean: ## caches, build leftovers and the local data in var/ (dev database, admin credentials); keeps .venv
	find . -path ./.venv -prune -o -type d -name __pycache__ -exec rm -rf {} +
	rm -rf .pytest_cache .ruff_cache .hypothesis build *.egg-info var

messages: venv-test ## the translation catalogues: collect every marked string into locale/ja (each app's and the project's), then compile the .mo files (needs GNU gettext)
	bash scripts/messages.sh
