"""The only modules that run torch-mlir and IREE: flag builders and one tool runner."""
