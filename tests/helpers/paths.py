"""Where things are: the repository root, from this file's place (tests/helpers/paths.py)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
