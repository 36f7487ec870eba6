# The two entry points of the README. Both install what they need first (scripts/setup.sh).
.PHONY: setup serve test lint

setup:
	@bash scripts/setup.sh

serve: setup
	.venv/bin/appliance serve

# the suite on two workers, then the tests marked alone (they time rates) with the machine to themselves
test: setup
	.venv/bin/ruff check appliance native spark tests perf
	.venv/bin/pytest -q -n 2 --no-loadscope-reorder -m 'not alone'; a=$$?; \
	.venv/bin/pytest -q -m alone; b=$$?; [ $$a -eq 0 ] && [ $$b -eq 0 ]

lint: setup
	.venv/bin/ruff check appliance native spark tests perf
