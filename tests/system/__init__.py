"""System tests: whole trainings, experiments, the benchmark (scripts/test.sh runs them; --unit leaves them out)."""
