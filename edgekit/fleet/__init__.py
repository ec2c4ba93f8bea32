"""Fleet rollouts: inventory → waves → per-wave health gates → halt/rollback → journal/resume."""
