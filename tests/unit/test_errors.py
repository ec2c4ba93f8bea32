import re
from pathlib import Path

import edgekit.errors
from edgekit.errors import EXIT_CODES, EdgekitError

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_exit_codes() -> dict[int, str]:
    """README's "### Exit codes" section: `0 ok · 1 other error · 2 …` → {0: "ok", …}."""
    text = README.read_text()
    section = text.split("### Exit codes", 1)[1]
    section = re.split(r"^#", section, maxsplit=1, flags=re.MULTILINE)[0]
    codes = {}
    for item in " ".join(section.split()).split("·"):
        match = re.fullmatch(r"(\d+) (.+)", item.strip())
        assert match, f"README exit codes: {item.strip()!r} is not 'CODE meaning'"
        code = int(match[1])
        assert code not in codes, f"README lists exit code {code} twice"
        codes[code] = match[2]
    return codes


def test_the_readme_documents_exactly_the_exit_codes_of_the_error_classes():
    documented = readme_exit_codes()
    assert documented[0] == "ok"
    assert documented[1] == "other error" and EdgekitError.exit_code == 1
    raised = {}
    for name, code in EXIT_CODES.items():
        raised.setdefault(code, []).append(name)
    undocumented = {c: names for c, names in raised.items() if c not in documented}
    assert not undocumented, f"exit codes missing from README.md: {undocumented}"
    unknown = set(documented) - set(raised) - {0}
    assert not unknown, f"README.md documents exit codes no error class has: {sorted(unknown)}"


def test_every_error_class_is_in_the_exit_code_table():
    classes = [c for c in vars(edgekit.errors).values()
               if isinstance(c, type) and issubclass(c, EdgekitError)]
    missing = {c.__name__ for c in classes} - set(EXIT_CODES)
    assert not missing, f"add {sorted(missing)} to edgekit.errors.EXIT_CODES"
