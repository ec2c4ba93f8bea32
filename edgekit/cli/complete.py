"""Shell completion of the names users type: target profiles, registered devices, recipes,
apps.

click asks these while the shell completes (`_EDGEKIT_COMPLETE=…_complete`, set by the script
`edgekit completion SHELL` prints). Each reads a directory listing or the device registry,
never a profile or recipe body, and a failure completes nothing rather than printing an error
into the user's command line.
"""

from __future__ import annotations

from click.shell_completion import CompletionItem

SHELLS = ("bash", "zsh", "fish")
COMPLETE_VAR = "_EDGEKIT_COMPLETE"


def script(cli, shell: str) -> str:
    """The completion script click writes for `shell`, for the `edgekit` command."""
    from click.shell_completion import get_completion_class
    return get_completion_class(shell)(cli, {}, "edgekit", COMPLETE_VAR).source()


def targets(ctx, param, incomplete: str) -> list[CompletionItem]:
    """Profile names (EDGEKIT_TARGETS_PATH, ./targets, built-in); a path completes as a file."""
    if "/" in incomplete or incomplete.endswith((".yaml", ".yml")):
        return [CompletionItem(incomplete, type="file")]
    try:
        from edgekit.config.profiles import available_targets
        names = available_targets()
    except Exception:  # noqa: BLE001 — completion must never break the shell's line
        return []
    return [CompletionItem(name) for name in sorted(names) if name.startswith(incomplete)]


def devices(ctx, param, incomplete: str) -> list[CompletionItem]:
    """Registered device names (`edgekit devices list`; lab devices register themselves)."""
    try:
        from edgekit.config.devices import load_registry
        entries = load_registry()
    except Exception:  # noqa: BLE001 — a broken registry is reported by the command itself
        return []
    return [CompletionItem(name, help=entry.address) for name, entry in sorted(entries.items())
            if name.startswith(incomplete)]


def recipes(ctx, param, incomplete: str) -> list[CompletionItem]:
    """Recipe files: the shell's own file completion, and the example recipes edgekit ships
    (by their full path) when what is typed is a prefix of it."""
    found = [CompletionItem(incomplete, type="file")]
    try:
        from edgekit.config.resources import recipes_dir
        shipped = sorted(recipes_dir().glob("*.yaml"))
    except Exception:  # noqa: BLE001
        return found
    if incomplete:
        found += [CompletionItem(str(path)) for path in shipped
                  if str(path).startswith(incomplete)]
    return found


BUNDLES_LOOKED_AT = 256     # ./build folders read for app names, at most


def apps(ctx, param, incomplete: str) -> list[CompletionItem]:
    """App names of the bundles built here (`./build/*/manifest.json`'s `app`): the name a
    `--app` asks for is the recipe's, which is what `edgekit build` put there."""
    import itertools
    import json
    from pathlib import Path
    names = set()
    for manifest in itertools.islice(Path("build").glob("*/manifest.json"), BUNDLES_LOOKED_AT):
        try:
            app = json.loads(manifest.read_text()).get("app")
        except Exception:  # noqa: BLE001 — completion must never break the shell's line
            continue
        if isinstance(app, str) and app.startswith(incomplete):
            names.add(app)
    return [CompletionItem(name) for name in sorted(names)]
