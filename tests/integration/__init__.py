"""Real processes and real servers; every test here is marked slow (conftest.py)."""
