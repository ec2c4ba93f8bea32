"""`edgekit tune`: measure lowering × flag set × threads per model and target, keep the
fastest variant that validates (see tuner.py)."""
