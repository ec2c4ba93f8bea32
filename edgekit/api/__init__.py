"""The application layer: what a command does, composed from the layers below it (build and
deploy, tune, quantization comparisons, fleet updates, the demo). The CLI calls these; so can
any Python program."""
