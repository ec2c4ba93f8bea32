"""The docs people walk (issue 39): a short README with the two commands and a tour, an MkDocs
site that builds in strict mode with its reference generated from the code, and every
`edgekit` command printed in either one that the command line knows."""

import importlib.util
import os
import re
import subprocess
import sys
import tomllib

import click
import pytest

from edgekit.errors import EXIT_CODES
from tests.docs_blocks import (DOCS, README, REPO, blocks, edgekit_invocations, markdown_files,
                               runnable_blocks, substitute_board_addresses)

SETUP = ("sudo bash .ci/setup.sh      # the one step that needs root\n"
         "edgekit demo                # as yourself")
TESTS = "sudo bash .ci/setup.sh && python3 -m pytest -q"


def gen_reference():
    spec = importlib.util.spec_from_file_location("gen_reference", DOCS / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_site_builds_in_strict_mode(tmp_path):
    """Broken links and anchors fail the build; the generated pages are part of it."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_MKDOCS_2_WARNING": "1",
           "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "--config-file", str(REPO / "mkdocs.yml"), "--site-dir",
                           str(tmp_path / "site")], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for page in gen_reference().PAGES:
        assert (tmp_path / "site" / page.removesuffix(".md") / "index.html").is_file(), page
    assert not (tmp_path / "site" / "gen_reference.py").exists()


def test_the_exit_code_page_lists_exactly_the_error_classes():
    page = gen_reference().exit_codes_page()
    rows = re.findall(r"^\| (\d+) \| `?(\w+|—)`? \|", page, flags=re.MULTILINE)
    documented = {name: int(code) for code, name in rows if name != "—"}
    assert documented == EXIT_CODES
    assert ("0", "—") in rows


def test_the_cli_reference_has_every_command_the_group_lists():
    module = gen_reference()
    page = module.cli_page()
    group = module.root_group()
    top = module.page_context(group, "edgekit", None)
    paths = [ctx.command_path for ctx, _ in module.walk_commands(group, top)]
    assert {"edgekit deploy", "edgekit bench run", "edgekit fleet update"} <= set(paths)
    for path in paths:
        assert f"\n## {path}\n" in page, path


def test_the_schema_pages_name_every_key_of_the_models():
    from edgekit.config.fleet import FleetFile
    from edgekit.config.profiles import Target
    from edgekit.config.recipe import Recipe
    module = gen_reference()
    for model, page in ((Recipe, module.recipe_page()), (Target, module.profile_page()),
                        (FleetFile, module.fleet_page())):
        for key in model.model_fields:
            assert f"| `{key}` |" in page, (model.__name__, key)


def test_readme_is_short_and_gives_the_two_commands_as_ci_runs_them():
    text = README.read_text()
    assert len(text.splitlines()) <= 200
    assert f"```\n{SETUP}\n```" in text
    assert f"```\n{TESTS}\n```" in text
    assert TESTS in (REPO / ".ci" / "run").read_text()


def test_the_readme_links_to_files_that_exist():
    """README is read on a forge and in the package, not in the site: its links are files
    (the generated reference pages are not, so README names the site for them)."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    local = [link for link in links if "://" not in link]
    assert len(local) > 20
    missing = [link for link in local if not (REPO / link).exists()]
    assert not missing


def test_the_readme_tier_table_has_a_row_per_test_marker():
    markers = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"][
        "ini_options"]["markers"]
    declared = {m.split(":", 1)[0].strip() for m in markers}
    rows = re.findall(r"^\| `(\w+)` \|", README.read_text(), flags=re.MULTILINE)
    assert len(rows) == len(set(rows))
    assert set(rows) == declared


def test_the_readme_tour_is_runnable_and_ends_with_the_lab_down():
    tour = [c for b in runnable_blocks(README) for c in b.commands()]
    assert tour[0].startswith("edgekit lab up") and tour[-1] == "edgekit lab down"
    assert len(tour) >= 8


def resolve(args: list[str]) -> str | None:
    """Why `edgekit ARGS` is not a command line the CLI takes (an unknown command or option),
    or None. Commands are found as the CLI finds them (`resolve_command`, lazily loaded
    groups too); nothing is invoked."""
    from edgekit.cli.main import cli
    command, name, parent, rest = cli, "edgekit", None, list(args)
    while isinstance(command, click.Group):
        ctx = command.make_context(name, rest, parent=parent, resilient_parsing=True)
        # the subcommand name and its arguments, as Group.invoke reads them
        protected = getattr(ctx, "_protected_args", None)       # click >= 8.2
        if protected is None:
            protected = ctx.protected_args
        remaining = [*protected, *ctx.args]
        if not remaining:
            return None
        name, sub, rest = command.resolve_command(ctx, remaining)
        if sub is None:
            return f"no command {name!r} in `{ctx.command_path}`"
        command, parent = sub, ctx
    ctx = click.Context(command, info_name=name, parent=parent)
    options = {o: p for p in command.get_params(ctx) if isinstance(p, click.Option)
               for o in (*p.opts, *p.secondary_opts)}
    i = 0
    while i < len(rest):
        token = rest[i]
        if token == "--":
            break
        if token.startswith("-") and len(token) > 1 and not token[1].isdigit():
            option, has_value, _ = token.partition("=")
            if option not in options:
                return f"`{ctx.command_path}` has no option {option}"
            param = options[option]
            if not (param.is_flag or param.count or has_value):
                i += 1                                  # its value
        i += 1
    return None


def test_every_edgekit_command_in_the_docs_is_one_the_cli_takes():
    wrong, seen = [], 0
    for path in markdown_files():
        for block in blocks(path):
            for args in edgekit_invocations(block):
                seen += 1
                why = resolve(args)
                if why:
                    wrong.append(f"{path.relative_to(REPO)}:{block.line}: "
                                 f"edgekit {' '.join(args)}: {why}")
    assert seen > 50
    assert not wrong, "\n".join(wrong)


def test_the_command_check_catches_a_wrong_command_and_option():
    assert resolve(["deploy", "build/x", "--host", "h", "--json"]) is None
    assert resolve(["bench", "lab-x86_64-1", "--app", "a", "--threads", "1,2"]) is None
    assert "no command" in resolve(["deplyo", "build/x"])
    assert "no option --hots" in resolve(["deploy", "build/x", "--hots", "h"])
    assert "no option --nope" in resolve(["fleet", "resume", "--nope"])


def test_runnable_blocks_are_found_by_their_marker(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("x\n\n<!-- runnable -->\n```bash\nedgekit lab up   # a comment\n"
                    "edgekit build --recipe r.yaml \\\n  --target host\n```\n\n"
                    "```\nedgekit no\n```\n")
    found = blocks(page)
    assert [b.runnable for b in found] == [True, False]
    assert found[0].commands() == ["edgekit lab up   # a comment",
                                   "edgekit build --recipe r.yaml    --target host"]
    assert edgekit_invocations(found[0]) == [["lab", "up"],
                                             ["build", "--recipe", "r.yaml", "--target", "host"]]


@pytest.mark.parametrize("command, expected", [
    ("edgekit probe pi@192.0.2.10", "edgekit probe lab-x86_64-1"),
    ("edgekit deploy b --host pi@192.0.2.10:2222 --json",
     "edgekit deploy b --host lab-x86_64-1 --json"),
    ("edgekit probe pi@198.51.100.1", "edgekit probe pi@198.51.100.1"),
])
def test_only_board_addresses_are_substituted(command, expected):
    assert substitute_board_addresses(command, "lab-x86_64-1") == expected
