"""Commands that translate a test set with trained runs and compare the scores: `nmt evaluate`
(evaluate.py), `nmt curve` (curve.py) and `nmt experiment` (experiment.py: prepare, train, evaluate,
curve, report). runs.py is what they share: the runs, their test split, translating through the cache.
Scoring itself uses no model and lives in nmt/evaluation/.
"""
