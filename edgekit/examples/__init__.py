"""In-tree example models (no torchvision: it does not import beside the pinned torch)."""
