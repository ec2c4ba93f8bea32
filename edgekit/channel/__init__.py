"""The pull path: a signed release channel in plain files, and its on-device agent."""
