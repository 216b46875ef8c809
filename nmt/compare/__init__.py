"""The commands that compare trained runs, one module each: `nmt evaluate`, `nmt curve`, `nmt experiment`
(prepare, train, evaluate, curve, report; its report.md in experiment_report.py), `nmt attention-checks` and
`nmt attention-scaling`; runs.py holds what they share. Scoring itself uses no model and lives in nmt/evaluation/.
"""
