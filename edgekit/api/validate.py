"""`edgekit validate`: a bundle's golden inputs run on this machine, compared with its golden
outputs."""

from __future__ import annotations

from pathlib import Path

from edgekit.models.report import ValidationReport


def validate(bundle: Path) -> ValidationReport:
    """The report; `report.ok` is False when outputs differ beyond the bundle's tolerances."""
    from edgekit.validate.local import validate_local
    return validate_local(bundle)


__all__ = ["ValidationReport", "validate"]
