"""What tests share: real servers, fakes, the code spawned ranks run, trace builders (tests/README.md)."""
