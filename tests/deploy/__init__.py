"""Checks of the deploy files: the compose stacks, the configs they mount, the wheel."""
