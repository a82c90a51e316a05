import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.hookimpl(tryfirst=True)  # before `-m "not slow"` deselects
def pytest_collection_modifyitems(config, items):
    """Every test in this folder runs real processes or real servers: slow (`make test-fast` leaves
    them out), whether or not it says so itself."""
    for item in items:
        if str(item.path).startswith(HERE + os.sep):
            item.add_marker(pytest.mark.slow)
