"""Plain data that flows between stages and out to users (bundles, reports)."""
