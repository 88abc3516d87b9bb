"""The TOML table of a config file, read without blocking and with one-line errors.

Apart from the fields' checks (simulator.config.sim_config.read_toml, which this feeds) because
it is about the file, not the fields: a FIFO or a device is never opened, and a missing,
unreadable, binary, invalid or too deeply nested file is one ``WHERE: expected ..., got ...``
line.
"""

from __future__ import annotations

import stat
from pathlib import Path

from specbatch.errors import SpecbatchError

try:
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def parse_toml(path: Path, where: str) -> dict:
    """The TOML table of a regular file (never opens a FIFO or a device, which could block);
    binary, deeply nested or unreadable files are one-line errors."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        raise SpecbatchError(f"{where}: expected an existing TOML file, got no such file") from None
    except OSError as exc:
        raise SpecbatchError(
            f"{where}: expected a readable TOML file, got {exc.strerror}") from None
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise SpecbatchError(f"{where}: expected a TOML file, got {kind}")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except OSError as exc:
        raise SpecbatchError(
            f"{where}: expected a readable TOML file, got {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecbatchError(f"{where}: expected valid TOML, got {exc}") from None
    except RecursionError:
        raise SpecbatchError(f"{where}: expected a flat TOML table, got values nested too "
                             "deeply to read") from None
