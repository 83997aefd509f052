"""Built-in catalogs: model architectures and hardware profiles (YAML under profiles/)."""

from __future__ import annotations

import os
from pathlib import Path

PROFILES_ENV = "ZEROTUNE_PROFILES"


def profiles_root() -> Path:
    """Root of the catalogs: $ZEROTUNE_PROFILES, else the copy shipped in the package.

    `zerotune/profiles` is a symlink to the repository's top-level `profiles/` folder, so a checkout
    and an installed wheel (which carries a real copy) read the same files.
    """
    root = os.environ.get(PROFILES_ENV)
    return Path(root) if root else Path(__file__).resolve().parents[1] / "profiles"
