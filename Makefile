# The two entry points of the README. Both install what they need first (scripts/setup.sh).
.PHONY: setup serve test lint

setup:
	@bash scripts/setup.sh

serve: setup
	.venv/bin/appliance serve

test: setup
	.venv/bin/ruff check appliance native spark tests perf
	.venv/bin/pytest -q -n 2 --no-loadscope-reorder

lint: setup
	.venv/bin/ruff check appliance native spark tests perf
