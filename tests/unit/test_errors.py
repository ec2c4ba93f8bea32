import edgekit.errors
from edgekit.errors import EXIT_CODES, EdgekitError

# The exit-code table users read is generated from EXIT_CODES (docs/gen_reference.py);
# tests/unit/test_docs.py holds the page to it.


def test_every_error_class_is_in_the_exit_code_table():
    classes = [c for c in vars(edgekit.errors).values()
               if isinstance(c, type) and issubclass(c, EdgekitError)]
    missing = {c.__name__ for c in classes} - set(EXIT_CODES)
    assert not missing, f"add {sorted(missing)} to edgekit.errors.EXIT_CODES"
