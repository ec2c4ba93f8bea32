"""Working with one device over SSH: probe, provision, deploy/activate/rollback, validate."""
