"""The test suite as a package (``tests.helpers``, ``tests.unit...``): see tests/README.md."""
