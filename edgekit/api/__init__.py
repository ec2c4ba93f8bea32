"""The application layer: what each command does, composed from the layers below it, one
module per command group (build, compare_quantization, deploy, rollback, releases, devices —
probe, provision, host keys and signers —, bench, fleet, lab, tune, check, bisect, validate,
targets, toolchains, schema, demo). Each function returns the object the CLI renders; the CLI
(edgekit.cli, held to this by an import-linter contract) parses options, calls one of these
and renders, and any Python program can call them the same way."""
