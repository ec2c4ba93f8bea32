"""Build stages (load → export → import → lower+compile → package), the plan check and the
content-addressed build cache."""
