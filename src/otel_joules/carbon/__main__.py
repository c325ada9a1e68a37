"""``python -m otel_joules.carbon [CODE]``: list the offline table, or show one country's figure."""

from __future__ import annotations

import sys

from otel_joules.carbon.offline import lookup_country, offline_table
from otel_joules.errors import ConfigurationError


def main(argv: list[str] | None = None) -> int:
    """Print every row (code, alpha-3, gCO2eq/kWh, year, name), or the row for the given code."""
    args = sys.argv[1:] if argv is None else argv
    if args:
        try:
            row, note = lookup_country(args[0])
        except ConfigurationError as exc:
            print(exc, file=sys.stderr)
            return 2
        print(f"{row.iso_code}  {row.iso3_code}  {row.gco2eq_per_kwh:8.1f} gCO2eq/kWh  {row.year}  {row.country}")
        print(f"source: {row.source}" + (f"\nnote: {note}" if note else ""))
        return 0
    for row in offline_table().values():
        print(f"{row.iso_code}  {row.iso3_code}  {row.gco2eq_per_kwh:8.1f}  {row.year}  {row.country}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:
        # `python -m otel_joules.carbon | head`: the reader left, which is not an error.
        sys.stderr.close()
        sys.exit(0)
