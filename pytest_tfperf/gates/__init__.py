"""The verdicts: budgets, and the rules judging a measurement against a stored baseline, a partner or a variant."""
