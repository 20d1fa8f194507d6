# The README's two commands. Both set everything up from a fresh clone.
.PHONY: demo test setup setup-dev

demo: setup
	.venv/bin/workbench demo

test: setup-dev
	bash dev/test.sh

setup:
	bash dev/setup.sh

setup-dev:
	bash dev/setup.sh --dev
